package faults

import (
	"reflect"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/topo"
)

// A seed draws one schedule, always the same: faults inside the load
// (from 10% to 85% of it), one after another with a heal between, the
// first cutting one instance from Redis past the lock TTL; without MySQL
// or namespaces, no MySQL links and no kernel cuts.
func TestPartitionSchedule(t *testing.T) {
	const d = 20 * time.Second
	for _, tc := range []struct {
		name          string
		mysql, kernel bool
		plan          func(seed int64, d time.Duration, n int, mysql, kernel bool) []netFault
	}{
		{"partition, MySQL and kernel", true, true, partitionSchedule},
		{"partition, SQLite, no namespaces", false, false, partitionSchedule},
		{"lease, MySQL and kernel", true, true, leaseSchedule},
		{"lease, SQLite, no namespaces", false, false, leaseSchedule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := int64(1); seed <= 50; seed++ {
				a, b := tc.plan(seed, d, 3, tc.mysql, tc.kernel), tc.plan(seed, d, 3, tc.mysql, tc.kernel)
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("seed %d drew two schedules", seed)
				}
				if len(a) < 2 {
					t.Fatalf("seed %d: %d faults in %s", seed, len(a), d)
				}
				end := time.Duration(0)
				for i, f := range a {
					if f.At < d/10 || f.At+f.span() > d*85/100 || f.At < end {
						t.Errorf("seed %d fault %d (%s): outside the load or overlapping the previous one (ended %s)", seed, i, f, end)
					}
					end = f.At + f.span()
					if !tc.mysql && (f.Dep != "Redis" || f.SlowDB > 0) {
						t.Errorf("seed %d fault %d (%s): a MySQL fault without MySQL", seed, i, f)
					}
					if !tc.kernel && f.Cut != "" {
						t.Errorf("seed %d fault %d (%s): a kernel cut without namespaces", seed, i, f)
					}
					if f.Cut == "" && f.Fault.Kind == "" {
						t.Errorf("seed %d fault %d: no fault", seed, i)
					}
				}
				if first := a[0]; first.Dep != "Redis" || first.Instance < 0 || first.Lasted <= partTTL ||
					(first.Cut == "" && first.Fault.Kind != topo.BlackHole) {
					t.Errorf("seed %d: the first fault %s does not cut one instance from Redis past the TTL", seed, first)
				}
			}
		})
	}
}
