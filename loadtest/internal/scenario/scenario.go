// Package scenario holds the harness's scenarios and the one table that
// names them: race, retry, pay, chaos and compare (scenarios.go, chaos.go),
// the fault scenarios (failover parts and partitions, package faults), and
// the bench (package bench).
//
// A scenario is a Func: it gets the harness (the flags in h.O, the logger,
// the shop binary and work directory; h.Setup starts its shops on a fresh
// database and Redis prefix, and the Env it returns verifies the run) and
// returns the report.Scenario it fills. Adding one is two steps:
//
//  1. write it, usually as a method of runner (the harness seen from this
//     package), in a file of its own: func (h runner) Mine(ctx
//     context.Context) report.Scenario;
//  2. add a line {"mine", of(runner.Mine)} to Registry, and the name to
//     Groups["all"] if `--scenario all` should run it.
//
// Run bounds every scenario by --max-duration, applies A1 (no 5xx but the
// expected ones) and stamps its name and times; --scenario accepts every
// name in Registry and Groups, nothing else.
package scenario

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/bench"
	"github.com/seckill-lab/shop/loadtest/internal/faults"
	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/report"
)

// Func runs one scenario on the harness.
type Func func(ctx context.Context, h *harness.Harness) report.Scenario

// Entry is a scenario's name and its Func.
type Entry struct {
	Name string
	Run  Func
}

// Registry is every scenario, in the order --help lists them.
var Registry = []Entry{
	{"race", of(runner.Race)},
	{"retry", of(runner.Retry)},
	{"pay", of(runner.Pay)},
	{"chaos", of(runner.Chaos)},
	{"compare", of(runner.Compare)},
	{faults.FailoverCluster, failoverPart(faults.FailoverCluster)},
	{faults.FailoverSentinel, failoverPart(faults.FailoverSentinel)},
	{faults.FailoverDBSemiSync, failoverPart(faults.FailoverDBSemiSync)},
	{faults.FailoverDBGalera, failoverPart(faults.FailoverDBGalera)},
	{faults.FailoverDBAsync, failoverPart(faults.FailoverDBAsync)},
	{"partition", faults.Partition},
	{"queue", faults.Queue},
	{"bench", bench.Run},
}

// Groups are names that stand for several scenarios.
var Groups = map[string][]string{
	"all":      {"race", "retry", "pay", "chaos", "compare"},
	"failover": {faults.FailoverCluster, faults.FailoverSentinel, faults.FailoverDBSemiSync, faults.FailoverDBGalera}, // each starts its own Redis or database; not the unsafe failover-db-async
}

// runner is the harness seen from this package: the scenarios are its
// methods, and the harness's fields and methods are its own.
type runner struct{ *harness.Harness }

func of(m func(runner, context.Context) report.Scenario) Func {
	return func(ctx context.Context, h *harness.Harness) report.Scenario { return m(runner{h}, ctx) }
}

func failoverPart(part string) Func {
	return func(ctx context.Context, h *harness.Harness) report.Scenario { return faults.Failover(ctx, h, part) }
}

// Lookup finds a scenario by name.
func Lookup(name string) (Func, bool) {
	for _, e := range Registry {
		if e.Name == name {
			return e.Run, true
		}
	}
	return nil, false
}

// Run runs the scenario called name (one of Registry), bounded by
// --max-duration, and judges A1 on its answers.
func Run(ctx context.Context, h *harness.Harness, name string) report.Scenario {
	ctx, cancel := context.WithTimeout(ctx, h.O.MaxDuration)
	defer cancel()
	start := time.Now()
	var r report.Scenario
	if run, ok := Lookup(name); ok {
		r = run(ctx, h)
	}
	checkA1(&r, h.O.Expect5xx)
	r.Name, r.Started, r.Elapsed = name, start, time.Since(start)
	r.ViaAPI = len(h.O.Targets) > 0
	if r.Error != "" {
		r.Pass = false
	}
	return r
}

// unexpectedServerErrors counts answers that A1 forbids: any 5xx but 503
// (a dependency that cannot answer is 503 with Retry-After, and is resent)
// and the statuses expected from something in front of the shop.
func unexpectedServerErrors(byOutcome map[string]int, expected []string) (int, string) {
	n := 0
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(byOutcome)) {
		status, _, _ := strings.Cut(k, " ")
		if strings.HasPrefix(k, "5") && status != "503" && !slices.Contains(expected, status) {
			n += byOutcome[k]
			kinds = append(kinds, fmt.Sprintf("%s: %d", k, byOutcome[k]))
		}
	}
	return n, strings.Join(kinds, ", ")
}

// checkA1 fails a scenario whose clients got a server error other than 503
// (or an expected one, see --expect-5xx).
func checkA1(r *report.Scenario, expected []string) {
	sums := []loadgen.Summary{r.Summary}
	for _, c := range r.Compare {
		sums = append(sums, c.Summary)
	}
	for _, s := range sums {
		if n, kinds := unexpectedServerErrors(s.ByOutcome, expected); n > 0 {
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL (A1): %d answers were server errors other than 503 (%s); the shops' logs say where they came from", n, kinds))
		}
	}
}
