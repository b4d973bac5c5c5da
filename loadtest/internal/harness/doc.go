// Package harness is what every scenario runs on: the flags (Options), the
// Harness (shop binary, work directory, logger, progress line) and Env, the
// shops one scenario started on a fresh backend (or the --target shops),
// with the client that drives them, the metrics sampler and Verify, which
// hands the run to package verify against the right database or API.
package harness
