package main

import "syscall"

// childAttr makes a child die with the harness (Linux: parent-death signal),
// so an interrupted run leaves no shop or redis-server behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// peekNow reports whether the socket fd has something to read (bytes, or
// the end of the stream, or an error), without reading it or waiting.
func peekNow(fd uintptr) bool {
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
