package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Header names of the idempotency contract.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// MaxKeyLen is the longest key ParseKey accepts, counted without quotes.
const MaxKeyLen = 255

var (
	// ErrKeyMissing means the request carried no key (or only blanks).
	ErrKeyMissing = errors.New("idem: idempotency key missing")
	// ErrKeyMalformed means the key is too long, empty inside quotes, or
	// holds a character outside A-Z a-z 0-9 - _ . :
	ErrKeyMalformed = errors.New("idem: idempotency key malformed")
	// ErrInvalidJSON means a body that should be JSON is not, so no
	// fingerprint can be taken; hosts answer 400 invalid_json.
	ErrInvalidJSON = errors.New("idem: body is not valid JSON")
)

// ParseKey validates an Idempotency-Key header value and returns the key.
//
// The key is 1-255 characters of A-Z a-z 0-9 - _ . : (docs/api.md). ';' is left
// out on purpose: in a bare value it would read as RFC 8941 parameters. The
// RFC 8941 string form "abc" names the same key as abc, and the length counts
// inside the quotes. Surrounding spaces and tabs are ignored, as HTTP does.
func ParseKey(header string) (string, error) {
	h := strings.Trim(header, " \t")
	if h == "" {
		return "", ErrKeyMissing
	}
	k := h
	if h[0] == '"' {
		if len(h) < 2 || h[len(h)-1] != '"' {
			return "", fmt.Errorf("%w: unterminated quoted string", ErrKeyMalformed)
		}
		k = h[1 : len(h)-1]
	}
	switch {
	case k == "":
		return "", fmt.Errorf("%w: empty", ErrKeyMalformed)
	case len(k) > MaxKeyLen:
		return "", fmt.Errorf("%w: %d characters, at most %d", ErrKeyMalformed, len(k), MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if !keyChar(k[i]) {
			return "", fmt.Errorf("%w: character %q at %d", ErrKeyMalformed, k[i], i)
		}
	}
	return k, nil
}

func keyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == ':'
}

// Canonical re-encodes a JSON body so that requests meaning the same thing
// get the same bytes: object keys sorted, no insignificant whitespace, no
// HTML escaping, numbers kept as written (1.0 and 1 differ, large integers
// lose nothing). An empty or all-whitespace body yields an empty result.
// Duplicate object keys keep the last value, as encoding/json does when the
// handler decodes the same body.
func Canonical(body []byte) ([]byte, error) {
	b := bytes.Trim(body, " \t\r\n")
	if len(b) == 0 {
		return []byte{}, nil
	}
	if !utf8.Valid(b) || !json.Valid(b) {
		return nil, ErrInvalidJSON
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte{'\n'}), nil
}

// Fingerprint identifies a request's content: the hex SHA-256 of the method,
// the route and the canonical body. A key replayed with another fingerprint
// is a reuse (422), not a retry.
func Fingerprint(method, route string, body []byte) (string, error) {
	c, err := Canonical(body)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(lengthPrefixed(nil, method, route))
	h.Write(c)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Scope is the storage name of a key: one principal's key on one method and
// route. Each part is length-prefixed, so no choice of parts can collide with
// another (user "a:b" + key "c" never meets user "a" + key "b:c").
func Scope(principal, method, route, key string) string {
	return joinParts(principal, method, route, key)
}

// joinParts writes each part as len:part, separated by '|': readable in
// redis-cli, and unambiguous whatever the parts hold.
func joinParts(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// lengthPrefixed appends each part as uvarint(len) + bytes.
func lengthPrefixed(dst []byte, parts ...string) []byte {
	for _, p := range parts {
		dst = binary.AppendUvarint(dst, uint64(len(p)))
		dst = append(dst, p...)
	}
	return dst
}

// ShouldStore is the one storage policy: whether a response is a final
// outcome worth replaying. Every 2xx, and every 4xx except those that say
// the request itself could not be judged yet or may succeed when simply sent
// again: 400 (invalid request), 401, 403 (credentials), 408 (timeout), 413
// (too large), 422 (the key was used for another request: an idempotency
// error, never an outcome) and 429 (rate limited). 1xx, 3xx and 5xx are never
// stored: a 5xx or 503 busy frees the key so a retry runs. (409 "in use" and
// 422 "reused" from the claim itself never reach the store.)
func ShouldStore(status int) bool {
	switch {
	case status >= 200 && status < 300:
		return true
	case status >= 400 && status < 500:
		switch status {
		case 400, 401, 403, 408, 413, 422, 429:
			return false
		}
		return true
	}
	return false
}
