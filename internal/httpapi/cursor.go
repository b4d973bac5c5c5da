package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// cursors are opaque to clients: payload plus an HMAC, so a cursor the
// server did not issue is refused (400) instead of silently misread.
type cursors struct{ key []byte }

func (cs cursors) sign(payload string) string {
	m := hmac.New(sha256.New, cs.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:12])
}

func (cs cursors) open(c string) (string, bool) {
	p, sig, ok := strings.Cut(c, ".")
	if !ok {
		return "", false
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p)
	got, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil {
		return "", false
	}
	m := hmac.New(sha256.New, cs.key)
	m.Write(payload)
	if !hmac.Equal(got, m.Sum(nil)[:12]) {
		return "", false
	}
	return string(payload), true
}

// pageParams reads ?limit= and ?cursor=; the cursor payload must start with kind.
func (cs cursors) pageParams(c *gin.Context, kind string) (limit int, payload string, err error) {
	limit = 50
	if v, ok := c.GetQuery("limit"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			return 0, "", invalid(map[string]string{"limit": "must be an integer between 1 and 200"})
		}
		limit = n
	}
	if v, ok := c.GetQuery("cursor"); ok {
		p, ok := cs.open(v)
		if !ok || !strings.HasPrefix(p, kind+":") {
			return 0, "", invalid(map[string]string{"cursor": "not a cursor this server issued"})
		}
		payload = strings.TrimPrefix(p, kind+":")
	}
	return limit, payload, nil
}
