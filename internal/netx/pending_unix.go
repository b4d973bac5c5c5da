//go:build unix

// Package netx asks a socket what the net package does not tell.
package netx

import "syscall"

// Pending reports whether the socket fd has something to read (request
// bytes, the end of the stream, or an error) without reading it or
// waiting: only "nothing yet" (EAGAIN) is false. known is false where the
// socket cannot be asked (not Unix).
func Pending(fd uintptr) (pending, known bool) {
	var b [1]byte
	for {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false, true
		}
		return true, true
	}
}
