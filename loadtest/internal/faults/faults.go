// Package faults holds the harness's fault scenarios: the failover parts
// (a Redis Cluster or Sentinel failover, a database failover on semi-sync
// replicas, Galera, or the unsafe asynchronous promotion; failover.go,
// dbfailover.go), the network partitions (partition.go) and compare's
// partition column (compare_partition.go). Each starts its own topology
// (internal/topo) or nemesis; package scenario lists them in its Registry.
package faults

import (
	"context"

	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/report"
)

// runner is the harness seen from this package: the scenarios are its
// methods, and the harness's fields and methods are its own.
type runner struct{ *harness.Harness }

// Failover runs one failover part (FailoverCluster, ...).
func Failover(ctx context.Context, h *harness.Harness, part string) report.Scenario {
	return runner{h}.Failover(ctx, part)
}

// Partition runs the partition scenario.
func Partition(ctx context.Context, h *harness.Harness) report.Scenario {
	return runner{h}.Partition(ctx)
}

// ComparePartition runs compare's partition column for one strategy.
func ComparePartition(ctx context.Context, h *harness.Harness, strategy string, seed int64) *report.PartitionCell {
	return runner{h}.comparePartition(ctx, strategy, seed)
}
