package procstat

import (
	"runtime"
	"strings"
	"testing"
)

func TestCPUPerUnit(t *testing.T) {
	p := Procs{Shops: []int{10, 11}, MariaDB: 20}
	a := Snap{ticks: map[int]int64{10: 100, 11: 50, 20: 7}, idle: 1000, total: 2000}
	b := Snap{ticks: map[int]int64{10: 300, 11: 150, 20: 107}, idle: 1100, total: 2400}
	c := p.PerUnit(a, b, 1000, "order")
	// 200 ticks = 2 s over 1,000 orders: 2,000 µs each.
	if c.ShopEach[0] != 2000 || c.ShopEach[1] != 1000 || c.Shop != 3000 || c.MariaDB != 1000 || c.Redis != 0 {
		t.Errorf("per order: %+v", c)
	}
	if c.IdleShare != 0.25 {
		t.Errorf("idle share %v, want 0.25", c.IdleShare)
	}
	if p.PerUnit(a, b, 0, "order") != nil {
		t.Error("no units, yet a figure")
	}
}

func TestProcTicks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	if n := procTicks(1); n < 0 {
		t.Errorf("pid 1: %d", n)
	}
	if idle, total := machineTicks(); total <= 0 || idle < 0 || idle > total {
		t.Errorf("machine: idle %d of %d", idle, total)
	}
	if procTicks(-5) != -1 {
		t.Error("a missing process has CPU time")
	}
}

func TestParseStatus(t *testing.T) {
	st := parseStatus(strings.NewReader("Name:\tshop\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t9\n"))
	if st["VmHWM"] != 200 || st["VmRSS"] != 100 || len(st) != 2 {
		t.Fatalf("parseStatus = %v, want VmHWM 200 MB, VmRSS 100 MB", st)
	}
}
