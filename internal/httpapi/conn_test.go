package httpapi

import (
	"io"
	"net"
	"strings"
	"testing"
)

// chunkConn serves a byte stream in reads of a fixed size.
type chunkConn struct {
	net.Conn
	data string
	size int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if c.data == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.data)
	c.data = c.data[n:]
	return n, nil
}

// The sniffer flags a head with both Content-Length and Transfer-Encoding
// and nothing else, however the stream is cut into reads: long header
// lines, bodies, pipelined requests.
func TestSniffConnFindsAmbiguousHeads(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	clean := "POST /api/v1/orders HTTP/1.1\r\nHost: shop\r\nX-Long: " + long + "\r\nContent-Length: 13\r\n\r\n{\"user_id\":1}" +
		"GET /api/v1/products/1 HTTP/1.1\r\nHost: shop\r\nUser-Agent: " + long + "\r\n\r\n"
	smuggle := "POST /api/v1/auth/token HTTP/1.1\r\nHost: shop\r\ncontent-length: 4\r\nTransfer-Encoding: chunked\r\n\r\nd\r\n{\"user_id\":1}\r\n0\r\n\r\n"
	for _, tc := range []struct {
		name   string
		stream string
		want   bool
	}{
		{"clean", clean, false},
		{"smuggling", smuggle, true},
		{"smuggling pipelined after clean", clean + smuggle, true},
		{"smuggling behind a long request line", "POST /api/v1/orders?q=" + long + " HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		{"a body line that looks like a header", "POST /x HTTP/1.1\r\nContent-Length: 40\r\n\r\nTransfer-Encoding: chunked\r\nabcdefghijkl", false},
	} {
		for _, size := range []int{1, 2, 7, 23, 24, 25, 64, 4096} {
			c := &sniffConn{Conn: &chunkConn{data: tc.stream, size: size}}
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
			if got := c.ambiguous.Load(); got != tc.want {
				t.Errorf("%s, reads of %d bytes: ambiguous %v, want %v", tc.name, size, got, tc.want)
			}
		}
	}
}
