// Package docs holds the training material (docs/en and docs/zh, the same
// chapters in English and Simplified Chinese) and its test: every block
// fenced as "sh runnable" is run, in order, against a freshly built shop
// with the embedded defaults, and every link into the code is checked to
// still point at what it names.
package docs
