package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/testenv"
)

// TestOutcomeUnknown makes the database stop answering right after a
// batch's COMMIT was sent (forwarded, so it lands, or dropped, so it rolls
// back) for longer than the request's deadline: the in-doubt look-up cannot
// learn the outcome in time, and the answer is 503 outcome_unknown with
// Retry-After, naming the order number (regular) or the product (seckill),
// never "unavailable", which would promise that nothing changed. The
// idempotency claim is kept meanwhile (a retry with the same key is 409
// in use, not run); once the database answers, the retry answers the
// order that landed (200, replayed) or places the one that did not (201),
// and the database holds exactly one order each time.
func TestOutcomeUnknown(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQL(t)
	b := newBackendOn(t, dsn)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	silent := testenv.StartSilentAfterCommit(t, cfg.Addr)
	cfg.Addr = silent.Addr
	in := b.start(t, map[string]string{"SHOP_MYSQL_DSN": cfg.FormatDSN(), "SHOP_REQUEST_TIMEOUT": "1s"})
	p := in.admin(t).createProduct("in doubt", 100, 100)
	const silence = 3 * time.Second

	for i, c := range []struct {
		name    string
		seckill bool
		forward bool // the COMMIT reaches the server: the order landed
	}{
		{"regular, landed", false, true},
		{"regular, rolled back", false, false},
		{"seckill, landed", true, true},
		{"seckill, rolled back", true, false},
	} {
		user := int64(i + 1)
		u := in.user(t, user)
		key := "doubt-" + strconv.Itoa(i)
		send := func() reply {
			if c.seckill {
				return u.seckill(p.ID)
			}
			return u.regular(p.ID, 1, key)
		}
		no := order.RegularNo(user, "key:"+key)
		if c.seckill {
			no = order.SeckillNo(user, p.ID)
		}
		silent.Arm(c.forward, silence)
		first := send()
		if silent.Cuts() != int64(i+1) {
			t.Fatalf("%s: %d COMMITs cut, want %d: the test did not test (answer %v)", c.name, silent.Cuts(), i+1, first)
		}
		if !first.want(t, http.StatusServiceUnavailable, "outcome_unknown") {
			continue
		}
		if first.header.Get("Retry-After") == "" {
			t.Errorf("%s: %v: no Retry-After", c.name, first)
		}
		pr := first.problem()
		if c.seckill && (pr.ProductID != p.ID || pr.OrderNo != "") || !c.seckill && (pr.OrderNo != no || pr.ProductID != 0) {
			t.Errorf("%s: problem names order %q, product %d; want %s", c.name, pr.OrderNo, pr.ProductID, map[bool]string{true: "the product", false: "order " + no}[c.seckill])
		}
		if !c.seckill && silent.Silent() {
			// The claim is kept while the outcome is unknown.
			send().want(t, http.StatusConflict, "idempotency_key_in_use")
		}
		// Retry to learn, as a client does, within a bound.
		var last reply
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			last = send()
			if last.status != http.StatusServiceUnavailable && last.status != http.StatusConflict {
				break
			}
		}
		want := http.StatusCreated
		if c.forward {
			want = http.StatusOK
		}
		if last.want(t, want, "") {
			if o := last.order(t); o.OrderNo != no || last.replayed() != c.forward {
				t.Errorf("%s: the retry answered order %s (replayed %v), want %s (replayed %v)", c.name, o.OrderNo, last.replayed(), no, c.forward)
			}
		}
		if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE user_id = ?", user); n != 1 {
			t.Errorf("%s: %d orders of the buyer after the retry, want 1", c.name, n)
		}
	}
	if n := b.stock(t, p.ID); n != 96 {
		t.Errorf("stock %d, want 96", n)
	}
}
