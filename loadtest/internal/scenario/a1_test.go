package scenario

import (
	"testing"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/report"
)

// TestA1FailsOnServerErrors: any scenario with a 5xx other than 503 fails,
// unless the status was declared as a load balancer's (--expect-5xx).
func TestA1FailsOnServerErrors(t *testing.T) {
	for _, tt := range []struct {
		outcomes map[string]int
		Expected []string
		Pass     bool
	}{
		{map[string]int{"201": 10, "503 busy": 3, "503 unavailable": 2, "no answer": 1}, nil, true},
		{map[string]int{"201": 10, "500 internal": 1}, nil, false},
		{map[string]int{"201": 10, "504": 2}, nil, false},
		{map[string]int{"201": 10, "504": 2}, []string{"504"}, true},
		{map[string]int{"201": 10, "500 internal": 1, "504": 2}, []string{"504"}, false},
	} {
		r := report.Scenario{Pass: true, Summary: loadgen.Summary{ByOutcome: tt.outcomes}}
		checkA1(&r, tt.Expected)
		if r.Pass != tt.Pass {
			t.Errorf("%v (expected %v): pass %v, want %v; notes %q", tt.outcomes, tt.Expected, r.Pass, tt.Pass, r.Notes)
		}
	}
	// A compare row's 500 counts too.
	r := report.Scenario{Pass: true, Compare: []report.CompareRow{{Summary: loadgen.Summary{ByOutcome: map[string]int{"500 internal": 1}}}}}
	if checkA1(&r, nil); r.Pass {
		t.Error("a 500 in a compare row passed")
	}
}
