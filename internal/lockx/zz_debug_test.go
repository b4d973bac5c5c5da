package lockx

import (
	"testing"
	"time"
)

func TestZZRedlockTiming(t *testing.T) {
	r, srvs, _ := startRedlock(t, 3, Options{})
	srvs[2].kill()
	for i := range 3 {
		s := time.Now()
		l, err := r.Acquire(bg, "k", AcquireOptions{TTL: 2 * time.Second})
		a := time.Since(s)
		mustNoErr(t, err, "acq")
		s = time.Now()
		_ = l.Refresh(bg, 0)
		rf := time.Since(s)
		s = time.Now()
		_ = l.Release(bg)
		t.Logf("%d acquire %v refresh %v release %v", i, a, rf, time.Since(s))
	}
	srvs[1].kill()
	s := time.Now()
	_, err := r.Acquire(bg, "k", AcquireOptions{TTL: time.Second})
	t.Logf("two down: %v %v", time.Since(s), err)
}
