package httpapi

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"hash"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// hs256Header is the header segment of every token authn.issue signs
// (golang-jwt writes {"alg":"HS256","typ":"JWT"}, keys sorted).
var hs256Header = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// tokenCheck accepts the user tokens the library would accept, for a
// fraction of its cost: every seckill request carries one, and the
// library's generic parse (the header into a map, each date through a
// nested json.Unmarshal, a new HMAC per token) was a tenth of the shop's
// CPU per order. It only ever accepts: a token it is not sure of (another
// header, an audience, anything malformed or refused) goes to the library,
// whose verdict and error stand. Its claims are checked by the library's
// own validator, so expiry, issuer and not-before mean what they meant.
type tokenCheck struct {
	macs      sync.Pool // hash.Hash: HMAC-SHA256 keyed with the secret
	validator *jwt.Validator
}

func newTokenCheck(secret []byte) *tokenCheck {
	t := &tokenCheck{validator: jwt.NewValidator(jwt.WithIssuer("shop"), jwt.WithExpirationRequired())}
	t.macs.New = func() any { return hmac.New(sha256.New, secret) }
	return t
}

// tokenClaims are the claims issue writes; the dates stay numbers until
// they are turned into the library's NumericDate as it would.
type tokenClaims struct {
	Iss string          `json:"iss"`
	Sub string          `json:"sub"`
	Exp json.Number     `json:"exp"`
	Nbf json.Number     `json:"nbf"`
	Iat json.Number     `json:"iat"`
	Jti string          `json:"jti"`
	Aud json.RawMessage `json:"aud"`
}

// issuedClaims reads claims written exactly as issue writes them,
// {"iss":"shop","sub":"<digits>","exp":<integer>,"iat":<integer>}, as
// json.Unmarshal would, without its reflection (more than half of the
// quick check's time). Anything else (spaces, other claims, another order, a number
// JSON would refuse, such as one with a leading zero) is not read here:
// false, and json.Unmarshal reads it. Only signed payloads get here.
func issuedClaims(b []byte) (tokenClaims, bool) {
	var c tokenClaims
	rest, ok := bytes.CutPrefix(b, []byte(`{"iss":"shop","sub":"`))
	if !ok {
		return c, false
	}
	sub, rest, ok := bytes.Cut(rest, []byte(`","exp":`))
	if !ok || !digits(sub, true) {
		return c, false
	}
	exp, iat, ok := bytes.Cut(rest, []byte(`,"iat":`))
	if !ok || !digits(exp, false) {
		return c, false
	}
	iat, ok = bytes.CutSuffix(iat, []byte("}"))
	if !ok || !digits(iat, false) {
		return c, false
	}
	c.Iss, c.Sub, c.Exp, c.Iat = "shop", string(sub), json.Number(exp), json.Number(iat)
	return c, true
}

// digits reports whether b is 1 to 15 decimal digits (a float64 holds
// them exactly), with a leading zero only when zeros says it may have one
// (a JSON number may not).
func digits(b []byte, zeros bool) bool {
	if len(b) == 0 || len(b) > 15 || (!zeros && len(b) > 1 && b[0] == '0') {
		return false
	}
	for _, d := range b {
		if d < '0' || d > '9' {
			return false
		}
	}
	return true
}

// user returns the user id of tok and true when tok is a valid user
// token in the form issue signs; false leaves the verdict to the library.
func (t *tokenCheck) user(tok string) (int64, bool) {
	header, rest, ok := strings.Cut(tok, ".")
	if !ok || header != hs256Header {
		return 0, false
	}
	payload, sig, ok := strings.Cut(rest, ".")
	enc := base64.RawURLEncoding
	var sum [sha256.Size]byte
	if !ok || enc.DecodedLen(len(sig)) != len(sum) || len(payload) > 1024 {
		return 0, false
	}
	if n, err := enc.Decode(sum[:], []byte(sig)); err != nil || n != len(sum) {
		return 0, false
	}
	if !t.signed(tok[:len(header)+1+len(payload)], sum[:]) {
		return 0, false
	}
	b, err := enc.DecodeString(payload)
	if err != nil {
		return 0, false
	}
	c, ok := issuedClaims(b)
	if !ok && (json.Unmarshal(b, &c) != nil || c.Aud != nil) {
		return 0, false
	}
	rc := jwt.RegisteredClaims{Issuer: c.Iss, Subject: c.Sub}
	for _, d := range []struct {
		n  json.Number
		to **jwt.NumericDate
	}{{c.Exp, &rc.ExpiresAt}, {c.Nbf, &rc.NotBefore}, {c.Iat, &rc.IssuedAt}} {
		if d.n == "" {
			continue
		}
		f, err := d.n.Float64()
		if err != nil {
			return 0, false
		}
		*d.to = numericDate(f)
	}
	if t.validator.Validate(rc) != nil {
		return 0, false
	}
	id, err := strconv.ParseInt(c.Sub, 10, 64)
	if err != nil || id <= 0 || id >= maxID {
		return 0, false
	}
	return id, true
}

// signed reports whether sum is the HMAC-SHA256 of signing.
func (t *tokenCheck) signed(signing string, sum []byte) bool {
	mac := t.macs.Get().(hash.Hash)
	defer t.macs.Put(mac)
	mac.Reset()
	var b [sha256.Size]byte
	mac.Write([]byte(signing))
	return hmac.Equal(mac.Sum(b[:0]), sum)
}

// numericDate is the library's reading of a JSON date of f seconds.
func numericDate(f float64) *jwt.NumericDate {
	whole, frac := math.Modf(f)
	return jwt.NewNumericDate(time.Unix(int64(whole), int64(frac*1e9)))
}
