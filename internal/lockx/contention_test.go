package lockx

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const childEnv = "LOCKX_TEST_CHILD"

// hold is one critical section as seen by its holder. start is taken after
// Acquire returned and end before Release is called, so the real hold in
// Redis contains [start, end]: overlapping records mean overlapping holds.
type hold struct {
	PID    int    `json:"pid"`
	G      int    `json:"g"`
	Fence  int64  `json:"fence"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Inside int64  `json:"inside"`
	Err    string `json:"err,omitempty"`
}

// runChild is the body of a re-executed test binary (see TestMain).
func runChild(mode string) int {
	if mode != "contend" {
		fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
		return 2
	}
	rdb, err := openRedis(os.Getenv("LOCKX_REDIS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer rdb.Close()
	goroutines, _ := strconv.Atoi(os.Getenv("LOCKX_GOROUTINES"))
	rounds, _ := strconv.Atoi(os.Getenv("LOCKX_ROUNDS"))
	startAt, _ := strconv.ParseInt(os.Getenv("LOCKX_START"), 10, 64)
	holds := contend(rdb, os.Getenv("LOCKX_PREFIX"), os.Getenv("LOCKX_KEY"), goroutines, rounds, time.Unix(0, startAt))
	enc := json.NewEncoder(os.Stdout)
	for _, h := range holds {
		_ = enc.Encode(h)
	}
	return 0
}

// contend runs goroutines that each take the lock rounds times through one
// shared Client. Inside each hold an INCR/DECR pair on a side key detects any
// other holder directly in Redis, independent of clocks.
func contend(rdb redis.UniversalClient, prefix, key string, goroutines, rounds int, startAt time.Time) []hold {
	c := New(rdb, Options{Prefix: prefix})
	defer c.Close()
	inside := prefix + "{" + key + "}:inside"
	var mu sync.Mutex
	var out []hold
	var wg sync.WaitGroup
	time.Sleep(time.Until(startAt))
	for g := range goroutines {
		wg.Go(func() {
			for range rounds {
				h := hold{PID: os.Getpid(), G: g}
				ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
				l, err := c.Acquire(ctx, key, AcquireOptions{TTL: 20 * time.Second, Wait: 30 * time.Second})
				if err != nil {
					h.Err = err.Error()
				} else {
					h.Start = time.Now().UnixNano()
					h.Fence = l.Fence().Number
					h.Inside, err = rdb.Incr(ctx, inside).Result()
					if err == nil {
						err = rdb.Decr(ctx, inside).Err()
					}
					if err != nil {
						h.Err = err.Error()
					}
					h.End = time.Now().UnixNano()
					if err := l.Release(ctx); err != nil {
						h.Err = "release: " + err.Error()
					}
				}
				cancel()
				mu.Lock()
				out = append(out, h)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// checkHolds fails the test unless the holds have strictly increasing fences
// in time order, never overlap, and never saw another holder inside.
func checkHolds(t *testing.T, holds []hold, want int) {
	t.Helper()
	if len(holds) != want {
		t.Fatalf("got %d holds, want %d", len(holds), want)
	}
	for _, h := range holds {
		if h.Err != "" {
			t.Fatalf("pid %d goroutine %d: %s", h.PID, h.G, h.Err)
		}
		if h.Inside != 1 {
			t.Fatalf("pid %d goroutine %d fence %d saw %d holders inside", h.PID, h.G, h.Fence, h.Inside)
		}
	}
	slices.SortFunc(holds, func(a, b hold) int { return int(a.Fence - b.Fence) })
	for i := 1; i < len(holds); i++ {
		p, c := holds[i-1], holds[i]
		if c.Fence <= p.Fence {
			t.Fatalf("fence %d repeated (pids %d and %d)", c.Fence, p.PID, c.PID)
		}
		if c.Start < p.End {
			t.Fatalf("overlap: fence %d (pid %d) held until %d, fence %d (pid %d) from %d",
				p.Fence, p.PID, p.End, c.Fence, c.PID, c.Start)
		}
	}
}

// TestContentionAcrossProcesses: 3 processes x 50 goroutines on one key.
func TestContentionAcrossProcesses(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	prefix := testPrefix(t, rdb)
	const procs, goroutines, rounds = 3, 50, 2
	startAt := time.Now().Add(300 * time.Millisecond).UnixNano()
	var wg sync.WaitGroup
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	for i := range procs {
		cmd := exec.Command(testBinary(t), "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=contend",
			"LOCKX_REDIS_URL="+redisURL(), "LOCKX_PREFIX="+prefix, "LOCKX_KEY=product:7",
			"LOCKX_GOROUTINES="+strconv.Itoa(goroutines), "LOCKX_ROUNDS="+strconv.Itoa(rounds),
			"LOCKX_START="+strconv.FormatInt(startAt, 10))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Go(func() {
			outs[i], errs[i] = cmd.Output()
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%w: %s", errs[i], stderr.String())
			}
		})
	}
	wg.Wait()
	var holds []hold
	pids := map[int]bool{}
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("child %d: %v", i, errs[i])
		}
		sc := bufio.NewScanner(bytes.NewReader(outs[i]))
		for sc.Scan() {
			var h hold
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
				t.Fatalf("child %d printed %q: %v", i, sc.Text(), err)
			}
			holds = append(holds, h)
			pids[h.PID] = true
		}
	}
	if len(pids) != procs {
		t.Fatalf("holds came from %d processes, want %d", len(pids), procs)
	}
	checkHolds(t, holds, procs*goroutines*rounds)
}

// TestContentionInProcess runs the same check inside this process, so the
// race detector sees the Client's own concurrency.
func TestContentionInProcess(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	prefix := testPrefix(t, rdb)
	var mu sync.Mutex
	var holds []hold
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			h := contend(rdb, prefix, "k", 25, 1, time.Now())
			mu.Lock()
			holds = append(holds, h...)
			mu.Unlock()
		})
	}
	wg.Wait()
	checkHolds(t, holds, 2*25)
}
