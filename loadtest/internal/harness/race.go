package harness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
)

// RaceConfig is the race load of the flags for e's shops, its progress
// reported as name.
func (h *Harness) RaceConfig(e *Env, name string) loadgen.Config {
	return loadgen.Config{Client: e.Client, AdminToken: e.Client.AdminToken, Users: h.O.Users, Stock: int64(h.O.Stock),
		Concurrency: h.O.Concurrency, Timeout: h.O.Timeout, Progress: h.Progress(name)}
}

// RaceClocked runs the race (reporting progress as cfg says) and sends on
// loadStart when its buyers start: Race creates products and logs buyers in
// first, and the faults' clock starts with the buyers.
func (h *Harness) RaceClocked(ctx context.Context, cfg loadgen.Config, loadStart chan<- time.Time) (loadgen.Result, error) {
	inner := cfg.Progress
	once := sync.Once{}
	cfg.Progress = func(st loadgen.Stats) {
		once.Do(func() { loadStart <- time.Now().Add(-st.Elapsed) })
		if inner != nil {
			inner(st)
		}
	}
	cfg.ProgressEvery = 100 * time.Millisecond
	res, err := loadgen.Race(ctx, cfg)
	h.EndProgress()
	return res, err
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Unfit is why a scenario that starts and faults its own shops cannot run
// with these flags ("" when it can): not against --target shops, and with
// at least minInstances instances (why says what for).
func (h *Harness) Unfit(name string, minInstances int, why string) string {
	if len(h.O.Targets) > 0 {
		return name + " " + ErrTargetMode.Error()
	}
	if h.O.Instances < minInstances {
		return fmt.Sprintf("%s needs --instances >= %d%s", name, minInstances, why)
	}
	return ""
}
