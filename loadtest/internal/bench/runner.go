package bench

import (
	"context"

	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/report"
)

// runner is the harness seen from this package: the bench's phases are
// its methods, and the harness's fields and methods are its own.
type runner struct{ *harness.Harness }

// Run is the bench scenario (scenario.Registry's "bench").
func Run(ctx context.Context, h *harness.Harness) report.Scenario {
	return runner{h}.Bench(ctx)
}
