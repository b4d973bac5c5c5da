package httpapi

import "github.com/seckill-lab/shop/internal/netx"

// pending reports whether the socket fd has something to read, without
// reading it (netx.Pending). Where the socket cannot be asked it says
// "something to read": a refused connection is answered without waiting
// for its request, and an idle connection is never evicted (it might be
// sending).
func pending(fd uintptr) bool {
	p, known := netx.Pending(fd)
	return p || !known
}
