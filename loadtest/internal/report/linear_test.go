package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

// TestLinearInReports: a scenario's and a compare row's linearizability
// verdicts reach the text, report.json and report.html, and porcupine's
// pictures are written beside report.html under the names the report links.
func TestLinearInReports(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	sk := func(user int64, status int, code, no string, start int) loadgen.Record {
		return loadgen.Record{Op: loadgen.OpSeckill, UserID: user, ProductID: 7, Quantity: 1, Status: status, Code: code, OrderNo: no,
			Start: t0.Add(time.Duration(start) * time.Millisecond), End: t0.Add(time.Duration(start+10) * time.Millisecond)}
	}
	check := func(recs ...loadgen.Record) (*loadgen.LinearReport, []verify.Violation) {
		rep, vs := loadgen.CheckLinear(recs, map[int64]int64{7: 1}, loadgen.Facts{}, loadgen.LinearOptions{})
		return &rep, vs
	}
	good, _ := check(sk(1, 201, "", "S1", 0), sk(2, 409, "sold_out", "", 20))
	bad, vs := check(sk(1, 409, "sold_out", "", 0), sk(2, 201, "", "S2", 20))
	Race := Scenario{Name: "race", Title: "race", Pass: true, Linearizable: good.Linearizable,
		Verdict: &verify.Verdict{Linearizable: good.Linearizable, Linear: good}}
	cmp := Scenario{Name: "compare", Title: "compare", Linearizable: bad.Linearizable,
		Compare: []CompareRow{{Row: "naive", Linearizable: bad.Linearizable, Linear: bad, Violations: vs}}}

	var text bytes.Buffer
	WriteText(&text, Race)
	WriteText(&text, cmp)
	for _, want := range []string{
		"linear:   linearizable: 2 operations in 1 products",
		"picture linear-race-p7.html: the whole history",
		"NO ",
		"linear:   naive NOT linearizable",
		"refused (1 asked) although at most 0 of the 1 units can have been sold before its answer",
		"failing  12:00:00.000000 -> 12:00:00.010000 user 1, instance 1: 409 sold_out",
		"evidence 12:00:00.020000 -> 12:00:00.030000 user 2, instance 1: 201 S2",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}

	dir := t.TempDir()
	if err := WriteFiles(dir, Full{Scenarios: []Scenario{Race, cmp}}); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"linear-race-p7.html", "linear-compare-naive-p7.html"} {
		pic, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Contains(pic, []byte("buyer 2 buys 1")) {
			t.Errorf("picture %s: %v", name, err)
		}
		if !bytes.Contains(page, []byte(`href="`+name+`"`)) {
			t.Errorf("report.html does not link %s", name)
		}
	}
	var rep struct {
		Scenarios []struct {
			Linearizable *bool `json:"linearizable"`
			Compare      []struct {
				Linearizable *bool `json:"linearizable"`
				Linear       struct {
					Products []struct {
						PictureFile string `json:"picture_file"`
					} `json:"products"`
				} `json:"linearizability"`
			} `json:"compare"`
		} `json:"scenarios"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	s := rep.Scenarios
	if s[0].Linearizable == nil || !*s[0].Linearizable || s[1].Linearizable == nil || *s[1].Linearizable ||
		*s[1].Compare[0].Linearizable || s[1].Compare[0].Linear.Products[0].PictureFile != "linear-compare-naive-p7.html" {
		t.Errorf("report.json: %s", b)
	}
}
