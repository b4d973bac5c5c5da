package idem

import (
	"regexp"
	"strings"
	"testing"
)

func TestRef(t *testing.T) {
	t.Parallel()
	a := Ref("S", "42", "7")
	if a != Ref("S", "42", "7") {
		t.Fatal("Ref is not stable")
	}
	if !regexp.MustCompile(`^S[A-Z2-7]{32}$`).MatchString(a) {
		t.Fatalf("Ref = %q, want S + 32 base32 chars", a)
	}
	seen := map[string][]string{}
	for _, parts := range [][]string{
		{"42", "7"}, {"42", "8"}, {"427"}, {"4", "27"}, {"42", "7", ""}, {"7", "42"}, {}, {""},
	} {
		no := Ref("S", parts...)
		if prev, dup := seen[no]; dup {
			t.Errorf("Ref(%q) == Ref(%q)", parts, prev)
		}
		seen[no] = parts
	}
	if got := Ref(strings.Repeat("P", 32), "x"); len(got) != 64 {
		t.Errorf("len = %d, want 64", len(got))
	}
	defer func() {
		if recover() == nil {
			t.Error("a 33-byte prefix did not panic")
		}
	}()
	Ref(strings.Repeat("P", 33), "x")
}
