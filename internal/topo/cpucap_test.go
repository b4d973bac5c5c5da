package topo

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCPUCap holds a busy process to a tenth of a CPU: over a second of
// wall time it gets about 100 ms of CPU, not a whole second.
func TestCPUCap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a CPU cap needs root")
	}
	c, err := NewCPUCap("topo-test-"+strings.ReplaceAll(t.Name(), "/", "-"), 0.1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if quota, period, cpus, err := c.Quota(); err != nil || quota != 10_000 || period != 100_000 || cpus != 0.1 {
		t.Fatalf("quota read back: %d/%d = %v (%v), want 10000/100000", quota, period, cpus, err)
	}
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	if err := c.Add(busy.Process.Pid); err != nil {
		t.Fatal(err)
	}
	before := procCPU(t, busy.Process.Pid)
	time.Sleep(time.Second)
	used := procCPU(t, busy.Process.Pid) - before
	if used > 300*time.Millisecond {
		t.Errorf("a process capped at 0.1 CPU used %s of CPU in 1s", used)
	}
}

// procCPU is a process's user + system time from /proc (USER_HZ 100).
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
