package idem

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
)

// maxOrderNoPrefix keeps OrderNo within 64 characters (32 + 32).
const maxOrderNoPrefix = 32

var orderNoEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// OrderNo derives a stable order number from a business key, such as
// (user, product) for a seckill order or (user, idempotency key) for a
// regular one. A unique index on it turns every duplicate of the same
// business request into a constraint violation, whatever Redis remembers.
//
// It is prefix followed by 32 characters A-Z 2-7: base32 of the first 160
// bits of SHA-256 over the length-prefixed parts, so ("ab", "c") and
// ("a", "bc") differ. The prefix should be URL-safe; one longer than 32
// bytes is a programming error and panics.
func OrderNo(prefix string, parts ...string) string {
	if len(prefix) > maxOrderNoPrefix {
		panic(fmt.Sprintf("idem: OrderNo prefix %q longer than %d bytes", prefix, maxOrderNoPrefix))
	}
	sum := sha256.Sum256(lengthPrefixed(nil, parts...))
	return prefix + orderNoEncoding.EncodeToString(sum[:20])
}
