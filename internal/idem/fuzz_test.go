package idem

import (
	"bytes"
	"errors"
	"testing"
)

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, "", `""`, `"`, "a b", "a;b", `"a";b=1`, "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		k, err := ParseKey(in)
		if err != nil {
			if !errors.Is(err, ErrKeyMissing) && !errors.Is(err, ErrKeyMalformed) {
				t.Fatalf("ParseKey(%q): unexpected error %v", in, err)
			}
			return
		}
		if len(k) == 0 || len(k) > MaxKeyLen {
			t.Fatalf("ParseKey(%q) = %q: bad length", in, k)
		}
		for i := 0; i < len(k); i++ {
			if !keyChar(k[i]) {
				t.Fatalf("ParseKey(%q) = %q: bad byte %q", in, k, k[i])
			}
		}
		// A key is its own canonical form, bare or quoted.
		for _, again := range []string{k, `"` + k + `"`} {
			if k2, err := ParseKey(again); err != nil || k2 != k {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q", again, k2, err, k)
			}
		}
	})
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"b":1,"a":[1,2.50,-0,1e9]}`, `"\u00e9<>&"`, `[{"a":null}]`, `{"a":1,"a":2}`, `{`, `1 2`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := Canonical(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidJSON) {
				t.Fatalf("Canonical(%q): unexpected error %v", in, err)
			}
			return
		}
		c2, err := Canonical(c)
		if err != nil {
			t.Fatalf("Canonical(%q) = %q, which fails: %v", in, c, err)
		}
		if !bytes.Equal(c, c2) {
			t.Fatalf("not idempotent: %q -> %q -> %q", in, c, c2)
		}
	})
}
