package bench

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// The bench mints tokens itself; the shop must accept them exactly as it
// accepts the demo login's (same checks as internal/httpapi's authn).
func TestBenchTokensVerifyLikeTheShops(t *testing.T) {
	u := &benchUsers{Secret: []byte("bench-secret")}
	m := u.Minter()
	for _, id := range []int64{1, 42, 9_999_999} {
		h := m.Bearer(id)
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			t.Fatalf("header %q lacks the Bearer scheme", h)
		}
		var claims jwt.RegisteredClaims
		_, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return u.Secret, nil },
			jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer("shop"), jwt.WithExpirationRequired())
		if err != nil {
			t.Fatalf("user %d: the shop would refuse the token: %v", id, err)
		}
		if claims.Subject != strconv.FormatInt(id, 10) {
			t.Fatalf("subject %q, want %d", claims.Subject, id)
		}
		var wrong jwt.RegisteredClaims
		if _, err := jwt.ParseWithClaims(tok, &wrong, func(*jwt.Token) (any, error) { return []byte("other"), nil }); err == nil {
			t.Fatal("a token verified under another secret")
		}
	}
	hs := u.Headers(5)
	seen := map[string]bool{}
	for _, h := range hs {
		if seen[h] {
			t.Fatal("headers() minted the same user twice")
		}
		seen[h] = true
	}
}

func TestBenchParsers(t *testing.T) {
	for body, want := range map[string]string{
		`{"type":"about:blank","status":409,"code":"sold_out"}`: "sold_out",
		`{"code": "busy","status":503}`:                         "busy",
		`{"status":409}`:                                        "",
		`{"code":`:                                              "",
	} {
		if got := problemCode([]byte(body)); got != want {
			t.Errorf("problemCode(%s) = %q, want %q", body, got, want)
		}
	}
	if k := answerKey(409, "sold_out"); k != "409 sold_out" {
		t.Errorf("answerKey = %q", k)
	}
}

// The harness's balancer sends a product to one instance, and when that
// instance goes only its products move: the others keep theirs.
func TestRendezvousMovesOnlyTheLostInstancesProducts(t *testing.T) {
	var all []*url.URL
	for _, s := range []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"} {
		u, _ := url.Parse(s)
		all = append(all, u)
	}
	used := map[string]int{}
	for p := range 300 {
		key := seckillPath(int64(p + 1))
		ranked := rendezvous(all, key)
		used[ranked[0].Host]++
		if again := rendezvous(slices.Clone(all), key); again[0] != ranked[0] {
			t.Fatalf("%s: %s, then %s", key, ranked[0].Host, again[0].Host)
		}
		without := rendezvous(slices.DeleteFunc(slices.Clone(all), func(u *url.URL) bool { return u == all[0] }), key)
		want := ranked[0]
		if want == all[0] {
			want = ranked[1] // the lost instance's products go to their next
		}
		if without[0] != want {
			t.Errorf("%s: on %s with all three, on %s without %s; want %s", key, ranked[0].Host, without[0].Host, all[0].Host, want.Host)
		}
	}
	for _, u := range all {
		if used[u.Host] < 50 {
			t.Errorf("instance %s holds %d of 300 products: the hash does not spread them", u.Host, used[u.Host])
		}
	}
}
