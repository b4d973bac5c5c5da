package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteText writes the report for a person at a terminal (`shop verify`):
// one line per product, a wallet total, each violation with its rows as JSON,
// the lab race products and their findings apart, and a last line that is
// "OK" or "FAIL: N violations" (lab findings do not count).
func (r Report) WriteText(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "audit at %s\n", r.CheckedAt.Format("2006-01-02T15:04:05.000Z07:00"))
	for _, p := range r.Products {
		writeProduct(&b, p, "", "")
	}
	if len(r.Products) == 0 {
		b.WriteString("no products\n")
	}
	if r.Wallets != nil {
		var balance, credited, paid int64
		for _, w := range r.Wallets {
			balance += w.Balance
			credited += w.Credited
			paid += w.Paid
		}
		fmt.Fprintf(&b, "wallets: %d, balance %d cents, credited %d, paid %d\n", len(r.Wallets), balance, credited, paid)
	}
	writeViolations(&b, r.Violations, "", "    ")
	if r.Lab != nil && len(r.Lab.Products) > 0 {
		fmt.Fprintf(&b, "lab race products (reported apart: their findings are the lesson of a race, not faults of the shop):\n")
		for _, p := range r.Lab.Products {
			writeProduct(&b, p.ProductSummary, "  ", ", raced with "+p.StockStrategy)
		}
		fmt.Fprintf(&b, "  lab findings: %d\n", len(r.Lab.Violations))
		writeViolations(&b, r.Lab.Violations, "  lab finding ", "      ")
	}
	switch n := len(r.Violations); n {
	case 0:
		b.WriteString("OK\n")
	case 1:
		b.WriteString("FAIL: 1 violation\n")
	default:
		fmt.Fprintf(&b, "FAIL: %d violations\n", n)
	}
	_, _ = io.WriteString(w, b.String())
}

func writeProduct(b *strings.Builder, p ProductSummary, indent, tail string) {
	fmt.Fprintf(b, "%sproduct %d: stock %d, added %d, sold %d, cancelled %d, returned %d, ledger %d",
		indent, p.ProductID, p.Stock, p.Added, p.Sold, p.Cancelled, p.Returned, p.Ledger)
	if p.Mirror != nil {
		fmt.Fprintf(b, ", mirror %d", *p.Mirror)
	}
	if p.Missing {
		b.WriteString(" (no products row)")
	}
	b.WriteString(tail + "\n")
}

func writeViolations(b *strings.Builder, vs []Violation, prefix, rowIndent string) {
	for _, v := range vs {
		fmt.Fprintf(b, "%s%s", prefix, v.Invariant)
		if v.ProductID != 0 {
			fmt.Fprintf(b, " product %d", v.ProductID)
		}
		if v.UserID != 0 {
			fmt.Fprintf(b, " user %d", v.UserID)
		}
		fmt.Fprintf(b, ": %s\n", v.Detail)
		for _, row := range v.Rows {
			j, err := json.Marshal(row)
			if err != nil {
				j = []byte(fmt.Sprint(row))
			}
			fmt.Fprintf(b, "%s%s\n", rowIndent, j)
		}
	}
}
