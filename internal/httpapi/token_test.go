package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// signed is a token with header and claims as given, signed with secret
// (HS256 over whatever header it names).
func signed(t testing.TB, secret []byte, header, claims string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	s := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	sig, err := jwt.SigningMethodHS256.Sign(s, secret)
	if err != nil {
		t.Fatal(err)
	}
	return s + "." + enc.EncodeToString(sig)
}

// TestTokenCheckAgreesWithLibrary: the quick check accepts only what the
// library accepts, with the same user; what it leaves to the library is
// decided there (identify falls back), so only its acceptances matter.
func TestTokenCheckAgreesWithLibrary(t *testing.T) {
	t.Parallel()
	secret := []byte("secretsecretsecret123")
	a := newAuthn(secret, []byte("adminadminadmin123"), time.Hour)
	issued, _, err := a.issue(42)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	hdr := `{"alg":"HS256","typ":"JWT"}`
	exp, past := itoa(now+3600), itoa(now-10)
	cases := []struct {
		name  string
		tok   string
		quick bool // the quick check decides it (accepts)
	}{
		{"issued", issued, true},
		{"minted like the bench", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+exp+`,"iat":`+itoa(now)+`}`), true},
		{"fractional exp", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+exp+`.5}`), true},
		{"exp as a string", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":"`+exp+`"}`), true},
		{"spaces", signed(t, secret, hdr, `{"iss": "shop", "sub": "7", "exp": `+exp+`, "iat": `+itoa(now)+`}`), true},
		{"iat first", signed(t, secret, hdr, `{"iss":"shop","sub":"7","iat":`+itoa(now)+`,"exp":`+exp+`}`), true},
		{"exp of 16 digits", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":1`+strings.Repeat("0", 15)+`,"iat":`+itoa(now)+`}`), true},
		{"exp with a leading zero", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":0`+exp+`,"iat":`+itoa(now)+`}`), false},
		{"iat with a leading zero", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+exp+`,"iat":0`+itoa(now)+`}`), false},
		{"expired as issued", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+past+`,"iat":`+itoa(now-100)+`}`), false},
		{"issued in the future (the library does not check iat either)", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+exp+`,"iat":`+itoa(now+600)+`}`), true},
		{"sub escaped", signed(t, secret, hdr, `{"iss":"shop","sub":"\u0037","exp":`+exp+`,"iat":`+itoa(now)+`}`), true},
		{"sub of 20 digits", signed(t, secret, hdr, `{"iss":"shop","sub":"`+strings.Repeat("9", 20)+`","exp":`+exp+`,"iat":`+itoa(now)+`}`), false},
		{"expired", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+past+`}`), false},
		{"no exp", signed(t, secret, hdr, `{"iss":"shop","sub":"7"}`), false},
		{"other issuer", signed(t, secret, hdr, `{"iss":"evil","sub":"7","exp":`+exp+`}`), false},
		{"not yet valid", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+exp+`,"nbf":`+itoa(now+600)+`}`), false},
		{"audience", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+exp+`,"aud":["x"]}`), false},
		{"jti not a string", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+exp+`,"jti":5}`), false},
		{"sub not a number", signed(t, secret, hdr, `{"iss":"shop","sub":"x","exp":`+exp+`}`), false},
		{"sub zero", signed(t, secret, hdr, `{"iss":"shop","sub":"0","exp":`+exp+`}`), false},
		{"sub a number", signed(t, secret, hdr, `{"iss":"shop","sub":7,"exp":`+exp+`}`), false},
		{"trailing data", signed(t, secret, hdr, `{"iss":"shop","sub":"7","exp":`+exp+`} x`), false},
		{"other secret", signed(t, []byte("another-secret-entirely"), hdr, `{"iss":"shop","sub":"7","exp":`+exp+`}`), false},
		{"header order", signed(t, secret, `{"typ":"JWT","alg":"HS256"}`, `{"iss":"shop","sub":"7","exp":`+exp+`}`), false},
		{"alg none", signed(t, secret, `{"alg":"none","typ":"JWT"}`, `{"iss":"shop","sub":"7","exp":`+exp+`}`), false},
		{"cut signature", issued[:len(issued)-2], false},
		{"four segments", issued + ".x", false},
		{"garbage", "not.a.token", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, ok := a.quick.user(tc.tok)
			if ok != tc.quick {
				t.Fatalf("quick check decided %v, want %v", ok, tc.quick)
			}
			var claims jwt.RegisteredClaims
			_, err := jwt.ParseWithClaims(tc.tok, &claims, func(*jwt.Token) (any, error) { return secret, nil },
				jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer("shop"), jwt.WithExpirationRequired())
			if ok && (err != nil || claims.Subject != itoa(id)) {
				t.Fatalf("quick check accepted user %d, the library: %v (subject %q)", id, err, claims.Subject)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// BenchmarkUserToken is the check of a seckill request's bearer: the quick
// check, and the library's parse it spares.
func BenchmarkUserToken(b *testing.B) {
	secret := []byte("secretsecretsecret123")
	a := newAuthn(secret, []byte("adminadminadmin123"), time.Hour)
	tok, _, err := a.issue(42)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("quick", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := a.quick.user(tok); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var claims jwt.RegisteredClaims
			if _, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return secret, nil },
				jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer("shop"), jwt.WithExpirationRequired()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestIssuedClaimsReadsWhatIssueWrites: the claims of a token issue signed
// take the quick reader's path, and read as json.Unmarshal reads them.
func TestIssuedClaimsReadsWhatIssueWrites(t *testing.T) {
	t.Parallel()
	a := newAuthn([]byte("secretsecretsecret123"), []byte("adminadminadmin123"), time.Hour)
	tok, _, err := a.issue(42)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	c, ok := issuedClaims(payload)
	if !ok {
		t.Fatalf("issuedClaims refused what issue wrote: %s", payload)
	}
	sameClaims(t, payload, c)
}

// FuzzIssuedClaims: whatever issuedClaims reads, json.Unmarshal reads the
// same way; what it refuses goes to json.Unmarshal anyway.
func FuzzIssuedClaims(f *testing.F) {
	for _, s := range []string{
		`{"iss":"shop","sub":"7","exp":1796449178,"iat":1796362778}`,
		`{"iss":"shop","sub":"007","exp":0,"iat":0}`,
		`{"iss":"shop","sub":"7","exp":01,"iat":1}`,
		`{"iss":"shop","sub":"7","exp":1,"iat":1} `,
		`{"iss":"shop","sub":"7","exp":1,"iat":1,"aud":"x"}`,
		`{"iss":"shop","sub":"7\u0022","exp":1,"iat":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, ok := issuedClaims(b); ok {
			sameClaims(t, b, c)
		}
	})
}

// sameClaims fails t unless json.Unmarshal reads b as c, with no audience.
func sameClaims(t *testing.T, b []byte, c tokenClaims) {
	t.Helper()
	var want tokenClaims
	if err := json.Unmarshal(b, &want); err != nil || want.Aud != nil ||
		want.Iss != c.Iss || want.Sub != c.Sub || want.Exp != c.Exp || want.Nbf != c.Nbf || want.Iat != c.Iat || want.Jti != c.Jti || c.Aud != nil {
		t.Fatalf("%s: issuedClaims read %+v, json.Unmarshal %+v (%v)", b, c, want, err)
	}
}
