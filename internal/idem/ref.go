package idem

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
)

// maxRefPrefix keeps a Ref within 64 characters (32 + 32).
const maxRefPrefix = 32

var refEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Ref derives a stable reference from a business key: an order number from
// (user, product) for a seckill order or (user, idempotency key) for a
// regular one, and likewise the references of products, restocks, payments
// and credits. A unique index on it turns every duplicate of the same
// business request into a constraint violation, whatever Redis remembers.
//
// It is prefix followed by 32 characters A-Z 2-7: base32 of the first 160
// bits of SHA-256 over the length-prefixed parts, so ("ab", "c") and
// ("a", "bc") differ. The prefix should be URL-safe; one longer than 32
// bytes is a programming error and panics.
func Ref(prefix string, parts ...string) string {
	if len(prefix) > maxRefPrefix {
		panic(fmt.Sprintf("idem: Ref prefix %q longer than %d bytes", prefix, maxRefPrefix))
	}
	sum := sha256.Sum256(lengthPrefixed(nil, parts...))
	return prefix + refEncoding.EncodeToString(sum[:20])
}
