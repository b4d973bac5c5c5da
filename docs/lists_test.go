package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestChapterLists: every chapter in docs/en (and the walk-through) is
// listed in the README's docs list and in docs/README.md, in both
// languages, and the instructor guide's "chapters 1-N" names the last one,
// so a new chapter cannot be left out of a list.
func TestChapterLists(t *testing.T) {
	chapters, err := filepath.Glob(filepath.Join("en", "[0-9][0-9]-*.md"))
	if err != nil || len(chapters) == 0 {
		t.Fatalf("no chapters in docs/en: %v", err)
	}
	pages := append(slices.Clone(chapters), filepath.Join("en", "follow-a-seckill-request.md"))
	readme, index := read(t, "../README.md"), read(t, "README.md")
	for _, p := range pages {
		name := filepath.Base(p)
		for _, lang := range langs {
			if !strings.Contains(readme, "(docs/"+lang+"/"+name+")") {
				t.Errorf("README.md's docs list does not link docs/%s/%s", lang, name)
			}
			if !strings.Contains(index, "("+lang+"/"+name+")") {
				t.Errorf("docs/README.md does not link %s/%s", lang, name)
			}
		}
	}
	last, _ := strconv.Atoi(filepath.Base(chapters[len(chapters)-1])[:2])
	for file, claim := range map[string]string{
		"instructor/guide.md":    fmt.Sprintf("chapters 1-%d.", last),
		"zh/instructor/guide.md": fmt.Sprintf("第 1-%d 章", last),
	} {
		if !strings.Contains(read(t, file), claim) {
			t.Errorf("%s does not say %q (the chapters are 1-%d)", file, claim, last)
		}
	}
}

// TestFiguresInStep: the bench figures quoted outside the README (the
// instructor guide's answer 7.3, chapter 9's table, EN and 中文) are the
// figures of the README's bench table, its one source, so a new run's
// figures cannot leave a stale copy behind.
func TestFiguresInStep(t *testing.T) {
	source := benchFigures(t, read(t, "../README.md"), "| measure (64 clients")
	if len(source) < 8 {
		t.Fatalf("README's bench table gave only %d figures: the table moved?", len(source))
	}
	quoted := map[string][]string{}
	for _, f := range []struct{ file, from, to, pattern string }{
		{"instructor/guide.md", "One order per hold: no.", "**7.4**", `([0-9][0-9,]{2,}) orders/s`},
		{"zh/instructor/guide.md", "如果每笔订单持有一次锁：不能。", "**7.4**", `每秒 ([0-9][0-9,]{2,}) 笔`},
	} {
		text := read(t, f.file)
		a, b := strings.Index(text, f.from), strings.Index(text, f.to)
		if a < 0 || b < a {
			t.Fatalf("%s: answer %s not found", f.file, f.from)
		}
		for _, m := range regexp.MustCompile(f.pattern).FindAllStringSubmatch(text[a:b], -1) {
			quoted[f.file] = append(quoted[f.file], m[1])
		}
	}
	for _, file := range []string{"en/09-scaling-a-hot-product.md", "zh/09-scaling-a-hot-product.md"} {
		rows := tableRows(read(t, file), " tx/s | 1 |") // the raw ceiling's row
		if len(rows) < 4 {
			t.Errorf("%s: no bench table with the raw ceiling's row", file)
			continue
		}
		for _, row := range rows[3:] { // header, rule, raw ceiling
			quoted[file] = append(quoted[file], strings.TrimSpace(row[2]))
		}
	}
	for _, file := range []string{"instructor/guide.md", "zh/instructor/guide.md", "en/09-scaling-a-hot-product.md", "zh/09-scaling-a-hot-product.md"} {
		if len(quoted[file]) == 0 {
			t.Errorf("%s quotes no bench figure where this test looks", file)
		}
		for _, n := range quoted[file] {
			if !source[n] && n != "2,000" { // 2,000: exercise 7.3's own rate, not a measurement
				t.Errorf("%s quotes %s orders/s, which the README's bench table does not have", file, n)
			}
		}
	}
	// The capped run: chapter 9's table (EN, 中文) is the README's, figure
	// for figure (its first column is words, the rest numbers).
	capped := benchFigures(t, read(t, "../README.md"), "| capped instances (0.2 CPU each")
	if len(capped) < 10 {
		t.Fatalf("README's capped table gave only %d figures: the table moved?", len(capped))
	}
	for file, header := range map[string]string{
		"en/09-scaling-a-hot-product.md": "| capped instances (0.2 CPU each",
		"zh/09-scaling-a-hot-product.md": "| 受限实例（每个 0.2 个 CPU",
	} {
		got := benchFigures(t, read(t, file), header)
		if len(got) < 10 {
			t.Errorf("%s: its capped table gave only %d figures", file, len(got))
		}
		for n := range got {
			if !capped[n] {
				t.Errorf("%s quotes %s in its capped table, which the README's capped table does not have", file, n)
			}
		}
	}
}

// benchFigures is every number of 3 or more digits in the README table
// whose header starts with header.
func benchFigures(t *testing.T, text, header string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, row := range tableRows(text, header) {
		for _, m := range regexp.MustCompile(`[0-9][0-9,]{2,}`).FindAllString(strings.Join(row, "|"), -1) {
			out[strings.TrimRight(m, ",")] = true
		}
	}
	return out
}

// tableRows is the rows (cells split on |) of the Markdown table that has a
// line containing marker, from its header to its last row.
func tableRows(text, marker string) [][]string {
	lines := strings.Split(text, "\n")
	at := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, marker) })
	if at < 0 {
		return nil
	}
	for at > 0 && strings.HasPrefix(lines[at-1], "|") {
		at--
	}
	var rows [][]string
	for _, l := range lines[at:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		rows = append(rows, strings.Split(l, "|"))
	}
	return rows
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDiagramsFenceRule: the diagrams draw the fenced UPDATE's condition as
// the code has it (inventory.guardedMove): an older fence, or the same
// fence from the same holder; never the "fence <= n" of before the
// equal-fence rule.
func TestDiagramsFenceRule(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("diagrams", "*.svg"))
	if err != nil {
		t.Fatal(err)
	}
	zh, _ := filepath.Glob(filepath.Join("diagrams", "zh", "*.svg"))
	stale := regexp.MustCompile(`fence (≤|&lt;=)`)
	for _, f := range append(files, zh...) {
		text := read(t, f)
		if m := stale.FindString(text); m != "" {
			t.Errorf("%s draws %q: the UPDATE takes fence < n, or fence = n from the same holder", f, m)
		}
		if strings.Contains(text, "UPDATE") && strings.Contains(text, "fence") && !strings.Contains(text, "fence &lt;") {
			t.Errorf("%s draws a fenced UPDATE without its condition fence < n", f)
		}
	}
}
