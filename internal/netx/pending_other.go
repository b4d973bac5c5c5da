//go:build !unix

// Package netx asks a socket what the net package does not tell.
package netx

// Pending cannot ask the socket here: known is false.
func Pending(uintptr) (pending, known bool) { return false, false }
