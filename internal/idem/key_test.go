package idem

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	k255 := strings.Repeat("k", 255)
	tests := []struct {
		in   string
		want string
		err  error
	}{
		{"abc", "abc", nil},
		{`"abc"`, "abc", nil},
		{"  abc\t", "abc", nil},
		{"A-z_0.9:x", "A-z_0.9:x", nil},
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{k255, k255, nil},
		{`"` + k255 + `"`, k255, nil},
		{"", "", ErrKeyMissing},
		{"   ", "", ErrKeyMissing},
		{k255 + "k", "", ErrKeyMalformed},
		{`"` + k255 + `k"`, "", ErrKeyMalformed},
		{`""`, "", ErrKeyMalformed},
		{`"`, "", ErrKeyMalformed},
		{`"abc`, "", ErrKeyMalformed},
		{`abc"`, "", ErrKeyMalformed},
		{`"a"b"`, "", ErrKeyMalformed},
		{`"a\"b"`, "", ErrKeyMalformed},
		{"a b", "", ErrKeyMalformed},
		{"a,b", "", ErrKeyMalformed},
		{"a;b", "", ErrKeyMalformed},
		{`"abc";x=1`, "", ErrKeyMalformed},
		{"a/b", "", ErrKeyMalformed},
		{"ключ", "", ErrKeyMalformed},
		{"a\x00b", "", ErrKeyMalformed},
	}
	for _, tt := range tests {
		got, err := ParseKey(tt.in)
		if !errors.Is(err, tt.err) || got != tt.want {
			t.Errorf("ParseKey(%.40q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		err      error
	}{
		{"", "", nil},
		{" \n\t", "", nil},
		{`{}`, `{}`, nil},
		{` { "b" : 1 , "a" : [ 1 , 2 ] } `, `{"a":[1,2],"b":1}`, nil},
		{`{"z":{"y":1,"x":2},"a":null}`, `{"a":null,"z":{"x":2,"y":1}}`, nil},
		{`{"n":12345678901234567890123,"f":1.50,"e":1E5,"m":-0}`, `{"e":1E5,"f":1.50,"m":-0,"n":12345678901234567890123}`, nil},
		{`{"s":"<a&b>","u":"\u00e9"}`, `{"s":"<a&b>","u":"é"}`, nil},
		{`{"a":1,"a":2}`, `{"a":2}`, nil},
		{`"x"`, `"x"`, nil},
		{`{`, "", ErrInvalidJSON},
		{`{} {}`, "", ErrInvalidJSON},
		{`{"a":01}`, "", ErrInvalidJSON},
		{"{\"a\":\"\xff\"}", "", ErrInvalidJSON},
		{`nul`, "", ErrInvalidJSON},
	}
	for _, tt := range tests {
		got, err := Canonical([]byte(tt.in))
		if !errors.Is(err, tt.err) || string(got) != tt.want {
			t.Errorf("Canonical(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(method, route, body string) string {
		t.Helper()
		s, err := Fingerprint(method, route, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := fp("POST", "/api/v1/orders", `{"product_id":7,"quantity":2}`)
	if len(base) != 64 {
		t.Fatalf("fingerprint %q: want 64 hex chars", base)
	}
	if got := fp("POST", "/api/v1/orders", "{\n  \"quantity\": 2,\n  \"product_id\": 7\n}\n"); got != base {
		t.Error("field order or whitespace changed the fingerprint")
	}
	for _, other := range []string{
		fp("POST", "/api/v1/orders", `{"product_id":7,"quantity":3}`),
		fp("PUT", "/api/v1/orders", `{"product_id":7,"quantity":2}`),
		fp("POST", "/api/v1/orders/", `{"product_id":7,"quantity":2}`),
		fp("POST", "/api/v1/orders", `{"product_id":7,"quantity":2.0}`),
	} {
		if other == base {
			t.Error("a different request has the same fingerprint")
		}
	}
	// Method and route are length-prefixed: moving a byte between them
	// changes the fingerprint.
	if fp("POSTa", "/b", "") == fp("POST", "a/b", "") {
		t.Error("method/route boundary is ambiguous")
	}
	if _, err := Fingerprint("POST", "/x", []byte("{")); !errors.Is(err, ErrInvalidJSON) {
		t.Errorf("invalid JSON: err = %v", err)
	}
}

func TestScopeUnambiguous(t *testing.T) {
	t.Parallel()
	a := Scope("a|1:b", "POST", "/x", "k")
	b := Scope("a", "1:b|POST", "/x", "k")
	if a == b {
		t.Fatalf("Scope collides: %q", a)
	}
	if got, want := Scope("42", "POST", "/api/v1/orders", "abc"), "2:42|4:POST|14:/api/v1/orders|3:abc"; got != want {
		t.Errorf("Scope = %q, want %q", got, want)
	}
}

func TestShouldStore(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]bool{
		100: false, 200: true, 201: true, 204: true, 302: false,
		400: false, 401: false, 402: true, 403: false, 404: true, 408: false,
		409: true, 410: true, 413: false, 422: false, 429: false,
		500: false, 502: false, 503: false,
	} {
		if got := ShouldStore(status); got != want {
			t.Errorf("ShouldStore(%d) = %v, want %v", status, got, want)
		}
	}
}
