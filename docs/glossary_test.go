package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// zhFiles lists the Chinese pages (docs/zh, any depth) and the Chinese
// copies of the diagrams (docs/diagrams/zh) with the given extensions.
func zhFiles(t *testing.T, exts ...string) []string {
	t.Helper()
	var out []string
	for _, root := range []string{"zh", filepath.Join("diagrams", "zh")} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) && p == root {
					return fs.SkipDir
				}
				return err
			}
			for _, e := range exts {
				if !d.IsDir() && strings.HasSuffix(p, e) {
					out = append(out, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) == 0 {
		t.Fatal("no Chinese pages found under docs/zh")
	}
	return out
}

// proseLines returns a page's lines with those inside fenced code blocks
// blanked (line numbers stay), so checks of the prose skip commands and
// their output.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	var fence string
	for i, l := range lines {
		if m := fenceRE.FindStringSubmatch(strings.TrimLeft(l, " >")); m != nil {
			switch {
			case fence == "":
				fence = m[1]
			case strings.HasPrefix(m[1], fence[:1]) && len(m[1]) >= len(fence) && strings.TrimSpace(m[2]) == "":
				fence = ""
			}
			lines[i] = ""
			continue
		}
		if fence != "" {
			lines[i] = ""
		}
	}
	return lines
}

// glossaryBans reads docs/glossary.md's "do not use" column: the renderings
// that drifted into docs/zh once, each with the term to use instead.
func glossaryBans(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("glossary.md")
	if err != nil {
		t.Fatal(err)
	}
	bans := map[string]string{}
	col := -1
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if col < 0 {
			for i, c := range cells {
				if strings.HasPrefix(c, "do not use") {
					col = i
				}
			}
			continue
		}
		if col >= len(cells) || strings.HasPrefix(cells[0], "---") {
			continue
		}
		for _, bad := range strings.FieldsFunc(cells[col], func(r rune) bool { return r == '、' || r == ',' }) {
			if bad = strings.Trim(strings.TrimSpace(bad), "`"); bad != "" {
				bans[bad] = cells[1]
			}
		}
	}
	if col < 0 || len(bans) == 0 {
		t.Fatal(`docs/glossary.md: no "do not use" column, or nothing in it`)
	}
	return bans
}

// TestGlossary: docs/zh uses the glossary's renderings, none that the
// glossary marks "do not use". An English term may follow its Chinese
// rendering in full-width parentheses: 哈希标签（hash tag）.
func TestGlossary(t *testing.T) {
	bans := glossaryBans(t)
	res := map[string]*regexp.Regexp{}
	for bad := range bans {
		res[bad] = regexp.MustCompile(`(?i)` + regexp.QuoteMeta(bad))
	}
	for _, f := range zhFiles(t, ".md", ".svg") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for n, l := range proseLines(string(b)) {
			for bad, use := range bans {
				for _, at := range res[bad].FindAllStringIndex(l, -1) {
					if strings.HasSuffix(l[:at[0]], "（") && !strings.ContainsFunc(bad, isHan) {
						continue
					}
					t.Errorf("%s:%d: %q: the glossary says %s, and lists %q as not to use", f, n+1, bad, use, bad)
				}
			}
		}
	}
}

func isHan(r rune) bool { return unicode.Is(unicode.Han, r) }

// isCJK: a Han character or a full-width punctuation mark.
func isCJK(r rune) bool {
	return isHan(r) || (r >= 0x3000 && r <= 0x303f) || (r >= 0xff00 && r <= 0xffef) || r == '“' || r == '”'
}

// blockStart matches a line that starts a block of its own (a list item,
// heading, table row, HTML, image, quote), after its indentation.
var blockStart = regexp.MustCompile(`^(([-*+]|\d+[.)])\s|#|\||<|!\[|>)`)

// TestChineseParagraphs: no single newline between two Chinese characters
// inside a paragraph of docs/zh or of docs/README.md (Markdown renders it
// as a space, which Chinese text does not have). Code blocks, tables, headings and the
// starts of list items are not paragraph continuations.
func TestChineseParagraphs(t *testing.T) {
	quote := regexp.MustCompile(`^\s*(>\s?)*`)
	for _, f := range append(zhFiles(t, ".md"), "README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := proseLines(string(b))
		for i := 1; i < len(lines); i++ {
			prev, next := lines[i-1], lines[i]
			pq, nq := quote.FindString(prev), quote.FindString(next)
			pc, nc := strings.TrimSpace(prev[len(pq):]), strings.TrimSpace(next[len(nq):])
			if pc == "" || nc == "" || strings.Count(pq, ">") != strings.Count(nq, ">") {
				continue
			}
			if strings.HasPrefix(pc, "|") || strings.HasPrefix(pc, "#") || strings.HasPrefix(pc, "<") || blockStart.MatchString(nc) {
				continue
			}
			if strings.HasSuffix(prev, "  ") || strings.HasSuffix(prev, `\`) {
				continue // an explicit line break
			}
			last, _ := utf8.DecodeLastRuneInString(pc)
			first, _ := utf8.DecodeRuneInString(nc)
			if isCJK(last) && isCJK(first) {
				t.Errorf("%s:%d: a line break inside a Chinese paragraph (%q / %q) renders as a space: join the lines", f, i, tail(pc), head(nc))
			}
		}
	}
}

func tail(s string) string {
	r := []rune(s)
	return string(r[max(0, len(r)-8):])
}

func head(s string) string {
	r := []rune(s)
	return string(r[:min(len(r), 8)])
}

// shape is what a translation must keep of its original: the heading
// levels in order, the number of table rows and list items, the anchors,
// and the code blocks verbatim.
type shape struct {
	headings            []string
	tableRows, items    int
	anchors, codeBlocks []string
}

var (
	anchorRE   = regexp.MustCompile(`<a id="([^"]+)">`)
	listItemRE = regexp.MustCompile(`^\s*([-*+]|\d+\.)\s`)
)

func shapeOf(t *testing.T, path string) shape {
	t.Helper()
	blocks, _ := parse(t, path)
	var s shape
	for _, b := range blocks {
		s.codeBlocks = append(s.codeBlocks, b.body)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range proseLines(string(b)) {
		switch {
		case strings.HasPrefix(l, "#"):
			s.headings = append(s.headings, strings.SplitN(l, " ", 2)[0])
		case strings.HasPrefix(l, "|"):
			s.tableRows++
		case listItemRE.MatchString(l):
			s.items++
		}
		for _, m := range anchorRE.FindAllStringSubmatch(l, -1) {
			s.anchors = append(s.anchors, m[1])
		}
	}
	return s
}

// TestReferenceTranslations: each docs/zh/<name>.md that translates the
// reference page docs/<name>.md (api.md, invariants.md, perf-lockx.md) is
// complete: the same sections, table rows, list items, anchors and code
// blocks as the original. A change to the English page that adds or drops
// any of them fails here until the 中文 page follows.
func TestReferenceTranslations(t *testing.T) {
	zh, err := filepath.Glob(filepath.Join("zh", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, z := range zh {
		base := filepath.Base(z)
		if chapterRE.MatchString(base) {
			continue
		}
		if _, err := os.Stat(base); err != nil {
			continue // TestTranslations names it
		}
		n++
		en, zs := shapeOf(t, base), shapeOf(t, z)
		if !slices.Equal(en.headings, zs.headings) {
			t.Errorf("%s: headings %v, but %s has %v", z, zs.headings, base, en.headings)
		}
		if en.tableRows != zs.tableRows || en.items != zs.items {
			t.Errorf("%s: %d table rows and %d list items, but %s has %d and %d", z, zs.tableRows, zs.items, base, en.tableRows, en.items)
		}
		if !slices.Equal(en.anchors, zs.anchors) {
			t.Errorf("%s: anchors %v, but %s has %v", z, zs.anchors, base, en.anchors)
		}
		if !slices.Equal(en.codeBlocks, zs.codeBlocks) {
			t.Errorf("%s: its code blocks differ from those of %s (copy them verbatim)", z, base)
		}
	}
	for _, must := range []string{"api.md", "invariants.md", "perf-lockx.md"} {
		if _, err := os.Stat(filepath.Join("zh", must)); err != nil {
			t.Errorf("docs/zh/%s, the 中文 version of docs/%s: %v", must, must, err)
		}
	}
	if n == 0 {
		t.Error("no translated reference pages under docs/zh")
	}
}
