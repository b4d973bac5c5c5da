package audit

import (
	"strings"
	"testing"
)

// TestOversoldOneDefinition pins the definition every report uses: units
// held beyond units added, with a lost update's leftover stock told apart.
func TestOversoldOneDefinition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		s        ProductSummary
		oversold int64
		detail   []string
	}{
		{"naive lost updates: 2000 orders for 200 units, 129 left", ProductSummary{Stock: 129, Added: 200, Sold: 2000}, 1800,
			[]string{"oversold by 1800", "129 units of stock that were already sold"}},
		{"cancelled orders do not count", ProductSummary{Stock: 0, Added: 10, Sold: 12, Cancelled: 2, Returned: 2}, 0, nil},
		{"stock below zero, conserved", ProductSummary{Stock: -3, Added: 10, Sold: 13}, 3, nil},
		{"leftover stock only", ProductSummary{Stock: 5, Added: 10, Sold: 8}, 0, []string{"3 units of stock that were already sold"}},
		{"a unit lost", ProductSummary{Stock: 0, Added: 10, Sold: 9}, 0, []string{"1 neither in stock nor held by an order"}},
	} {
		if got := tc.s.Oversold(); got != tc.oversold {
			t.Errorf("%s: Oversold() = %d, want %d", tc.name, got, tc.oversold)
		}
		got := imbalance(tc.s)
		for _, want := range tc.detail {
			if !strings.Contains(got, want) {
				t.Errorf("%s: I2 detail %q lacks %q", tc.name, got, want)
			}
		}
		if tc.oversold == 0 && strings.Contains(got, "oversold") {
			t.Errorf("%s: I2 detail %q says oversold", tc.name, got)
		}
	}
}
