package lockx

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	m := NewMetrics("shop")
	reg := prometheus.NewPedanticRegistry()
	mustNoErr(t, reg.Register(m), "register")
	c := newTestClient(t, rdb, Options{Metrics: m})

	l, err := c.Acquire(bg, "k", AcquireOptions{TTL: 600 * time.Millisecond, Watchdog: true})
	mustNoErr(t, err, "acquire")
	if _, err := c.Acquire(bg, "k", AcquireOptions{}); err == nil {
		t.Fatal("second acquire succeeded")
	}
	if _, err := c.Acquire(bg, "k", AcquireOptions{Wait: 30 * time.Millisecond}); err == nil {
		t.Fatal("waiting acquire succeeded")
	}
	if v := metricValue(t, m, "shop_lock_held"); v != 1 {
		t.Fatalf("held = %v, want 1", v)
	}
	time.Sleep(300 * time.Millisecond) // a renewal (every 200ms) or more
	mustNoErr(t, l.Release(bg), "release")

	want := map[string]float64{
		"shop_lock_acquire_duration_seconds": 3, // samples: obtained + 2 not obtained
		"shop_lock_wait_duration_seconds":    1,
		"shop_lock_hold_duration_seconds":    1,
		"shop_lock_hold_ttl_ratio":           1,
		"shop_lock_held":                     0,
		"shop_lock_lost_total":               0,
	}
	mfs, err := reg.Gather()
	mustNoErr(t, err, "gather")
	seen := map[string]bool{}
	for _, mf := range mfs {
		seen[mf.GetName()] = true
		if w, ok := want[mf.GetName()]; ok {
			var v float64
			for _, mt := range mf.GetMetric() {
				v += metricNumber(mt)
			}
			if v != w {
				t.Errorf("%s = %v, want %v", mf.GetName(), v, w)
			}
		}
	}
	for _, name := range []string{"shop_lock_acquire_retries_total", "shop_lock_renewals_total", "shop_lock_renewal_failures_total"} {
		if !seen[name] {
			t.Errorf("metric %s missing", name)
		}
	}
	if v := metricValue(t, m, "shop_lock_renewals_total"); v < 1 {
		t.Errorf("renewals = %v, want >= 1", v)
	}
	if v := metricValue(t, m, "shop_lock_acquire_retries_total"); v < 1 {
		t.Errorf("retries = %v, want >= 1", v)
	}
	// Two Clients may share one Metrics; nil Metrics is a no-op (every other
	// test runs with nil).
	var nilM *Metrics
	nilM.acquired(resultObtained, time.Now())
	nilM.holdEnded(time.Now(), time.Second)
}
