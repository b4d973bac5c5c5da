// Package procstat reads what Linux's /proc says about the processes that
// serve the shop (their CPU time, an instance's memory) and about the
// machine (its idle time, its listen queues), for the bench's figures.
package procstat

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/loadtest/internal/benchreport"
	"github.com/seckill-lab/shop/loadtest/internal/shops"
)

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const userHZ = 100

// Procs are the processes that serve an order: the shop instances, the
// database server and Redis (0: not found, e.g. SQLite or in-process Redis).
type Procs struct {
	Shops          []int
	MariaDB, Redis int
}

// Find finds the shop instances' processes, the database server's
// (its pid file, as root can read it) and Redis's (INFO's process_id).
func Find(ctx context.Context, c *shops.Cluster, db *sql.DB) Procs {
	var p Procs
	for _, i := range c.Instances {
		p.Shops = append(p.Shops, i.PID())
	}
	var file string
	if db != nil && db.QueryRowContext(ctx, "SELECT @@pid_file").Scan(&file) == nil {
		if b, err := os.ReadFile(file); err == nil {
			p.MariaDB, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	if c.Backend != nil && c.Backend.RedisKind != "embedded" {
		if o, err := redis.ParseURL(c.Backend.RedisURL); err == nil {
			rdb := redis.NewClient(o)
			if info, err := rdb.Info(ctx, "server").Result(); err == nil {
				for _, l := range strings.Split(info, "\n") {
					if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
						p.Redis, _ = strconv.Atoi(v)
					}
				}
			}
			rdb.Close()
		}
	}
	return p
}

// Snap is the CPU time of each process, and the machine's idle and
// total time, at one moment (clock ticks).
type Snap struct {
	ticks       map[int]int64
	idle, total int64
}

// Snap reads the processes' CPU time, and the machine's, now.
func (p Procs) Snap() Snap {
	s := Snap{ticks: map[int]int64{}}
	for _, pid := range append(append([]int{}, p.Shops...), p.MariaDB, p.Redis) {
		if pid > 0 {
			s.ticks[pid] = procTicks(pid)
		}
	}
	s.idle, s.total = machineTicks()
	return s
}

// procTicks is utime + stime of /proc/<pid>/stat; -1 when unreadable.
func procTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces; the fields after it
	// start past its closing parenthesis: state is field 3, utime 14.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return -1
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// machineTicks is the idle (idle + iowait) and total time of /proc/stat's
// cpu line.
func machineTicks() (idle, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return idle, total
}

// PerUnit is the CPU time each of p spent per unit (an order committed,
// a refusal answered) between a and b.
func (p Procs) PerUnit(a, b Snap, units int64, per string) *benchreport.CPU {
	if units <= 0 || b.total <= a.total {
		return nil
	}
	us := func(pid int) float64 {
		if pid <= 0 || a.ticks[pid] < 0 || b.ticks[pid] < 0 {
			return 0
		}
		return float64(b.ticks[pid]-a.ticks[pid]) * 1e6 / userHZ / float64(units)
	}
	out := &benchreport.CPU{Per: per, MariaDB: us(p.MariaDB), Redis: us(p.Redis),
		IdleShare: float64(b.idle-a.idle) / float64(b.total-a.total)}
	for _, pid := range p.Shops {
		out.ShopEach = append(out.ShopEach, us(pid))
		out.Shop += us(pid)
	}
	return out
}
