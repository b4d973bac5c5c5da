package netx

import (
	"net"
	"syscall"
)

// Readable reports whether c has something to read now (Pending), without
// reading it or waiting; known is false where the socket cannot be asked.
// It asks through the raw connection's Control, which no deadline of c
// holds up.
func Readable(c net.Conn) (ready, known bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	if err := rc.Control(func(fd uintptr) { ready, known = Pending(fd) }); err != nil {
		return false, false
	}
	return ready, known
}
