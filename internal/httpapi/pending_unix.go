//go:build unix

package httpapi

import "syscall"

// pending reports whether the socket fd has something to read, without
// reading it: request bytes, or the end of the stream (the client closed),
// or an error. Only "nothing yet" (EAGAIN) is false.
func pending(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true
	}
}
