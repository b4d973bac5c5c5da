// Package deploy holds the deployment files (nginx.conf here; the
// Dockerfile and docker-compose.yml at the repository root) and their tests.
// No Docker engine runs where the tests run, so the files are checked by
// reading them.
package deploy
