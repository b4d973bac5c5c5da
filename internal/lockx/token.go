package lockx

import (
	"crypto/rand"
	"encoding/base32"
	"sync"
)

// tokenBytes is the entropy of one token: 128 bits, as crypto/rand.Text.
const tokenBytes = 16

// tokens hands out owner tokens from a buffer of crypto/rand output refilled
// 4 KiB at a time (bsm/redislock does the same): one crypto/rand call per
// token cost about 2 µs here, a measurable share of an uncontended acquire.
var tokens tokenSource

type tokenSource struct {
	mu   sync.Mutex
	buf  [4096]byte
	left int // unused bytes at the end of buf
}

var tokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newToken returns 26 characters of base32 (the alphabet of crypto/rand.Text).
func newToken() string {
	var raw [tokenBytes]byte
	tokens.mu.Lock()
	if tokens.left < tokenBytes {
		rand.Read(tokens.buf[:]) // never returns an error; crashes the program if it cannot read
		tokens.left = len(tokens.buf)
	}
	used := tokens.buf[len(tokens.buf)-tokens.left:][:tokenBytes]
	copy(raw[:], used)
	clear(used) // the buffer never holds a token that was handed out
	tokens.left -= tokenBytes
	tokens.mu.Unlock()
	return tokenEncoding.EncodeToString(raw[:])
}
