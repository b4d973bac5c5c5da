package docs

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// The conventions the chapters follow, and this test enforces:
//
//   - A fenced block whose info string is "sh runnable" (or "bash runnable")
//     is run by TestRunnableBlocks. Words after it: needs=a,b (capabilities
//     the block needs, see capabilities in run_test.go) and timeout=90s.
//   - A line "# expect: <Go regexp>" in a runnable block is matched against
//     the block's combined output; "# expect-not: <regexp>" must not match.
//   - docs/en/NN-name.md and docs/zh/NN-name.md are the same chapter: the
//     same runnable blocks (comments other than expectations may differ,
//     full-line or after a command as " # ...", so the Chinese blocks can
//     carry Chinese comments) and the same links into the code.
//   - Blocks of one chapter share variables and functions (saved after each
//     block), not the working directory (each starts at the repository
//     root); a block waits for or stops what it starts in the background,
//     and sets no EXIT trap of its own.
//   - A link to a line of code, [`Name`](../../internal/x/y.go#L12), must
//     point inside the file, and Name (or its last dotted part) must appear
//     on exactly that line (or inside the range of an #L12-L20 link), and
//     not only in a comment when the code has it too. After code moved,
//     `go test ./docs/ -run TestLinks -update` rewrites such links.

var langs = []string{"en", "zh"}

// knownCapabilities are the needs= a block may name; run_test.go probes each.
var knownCapabilities = []string{"lab-lock", "redis-expiry"}

// readerTools are the programs the runnable blocks call besides the shop and
// Go, with the Debian package that has each: docs/README.md's "Before you
// start" must name every one (TestPrerequisites), and the docs test needs
// them on PATH.
var readerTools = []struct{ program, pkg string }{
	{"bash", "bash"},
	{"curl", "curl"},
	{"jq", "jq"},
	{"redis-cli", "redis-tools"},
	{"redis-server", "redis-server"}, // chapter 7's Cluster (cmd/topo starts redis-server)
	{"sqlite3", "sqlite3"},
}

// aptInstall is the install line docs/README.md gives Debian/Ubuntu readers.
const aptInstall = "apt-get install -y curl jq redis-server redis-tools sqlite3"

// block is one fenced code block of a chapter.
type block struct {
	file     string // path relative to docs/
	line     int    // line of the opening fence
	info     string
	runnable bool
	needs    []string
	timeout  time.Duration
	body     string
}

func (b block) name() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// trailingComment matches a shell comment after a command: " # ...".
var trailingComment = regexp.MustCompile(`\s+#\s.*$`)

// normalized is the block without its comments (full-line ones, except
// expectations, and trailing " # ..." ones) and blank lines: what must be
// identical between the two languages, whose comments differ.
func (b block) normalized() string {
	var out []string
	for _, l := range strings.Split(b.body, "\n") {
		t := strings.TrimSpace(l)
		if isExpectation(t) {
			out = append(out, t)
			continue
		}
		if strings.HasPrefix(t, "#") || t == "" {
			continue
		}
		out = append(out, strings.TrimRight(trailingComment.ReplaceAllString(l, ""), " \t"))
	}
	return strings.Join(out, "\n")
}

func isExpectation(line string) bool {
	return strings.HasPrefix(line, "# expect:") || strings.HasPrefix(line, "# expect-not:")
}

// expectations returns the regexps a block's output must and must not match.
func (b block) expectations() (must, mustNot []*regexp.Regexp, err error) {
	for _, l := range strings.Split(b.body, "\n") {
		t := strings.TrimSpace(l)
		var list *[]*regexp.Regexp
		var src string
		switch {
		case strings.HasPrefix(t, "# expect:"):
			list, src = &must, strings.TrimSpace(strings.TrimPrefix(t, "# expect:"))
		case strings.HasPrefix(t, "# expect-not:"):
			list, src = &mustNot, strings.TrimSpace(strings.TrimPrefix(t, "# expect-not:"))
		default:
			continue
		}
		re, err := regexp.Compile(src)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: expectation %q: %w", b.name(), src, err)
		}
		*list = append(*list, re)
	}
	return must, mustNot, nil
}

// link is one markdown link of a chapter.
type link struct {
	file   string // path relative to docs/
	line   int
	text   string
	target string
}

// chapter is one docs/<lang>/NN-*.md file, parsed.
type chapter struct {
	lang, base string // base: "01-locks-vs-idempotency.md"
	num        string // "01"
	path       string // relative to docs/
	blocks     []block
	links      []link
}

var (
	fenceRE   = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*(.*)$")
	linkRE    = regexp.MustCompile(`\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)\)`)
	chapterRE = regexp.MustCompile(`^(\d\d)-[a-z0-9-]+\.md$`)
	// pageRE names a walk-through page beside the chapters (no exercises,
	// nothing to run): translated and indexed like a chapter, see pages.
	pageRE = regexp.MustCompile(`^[a-z][a-z0-9-]*\.md$`)
)

// parse reads a markdown file (path relative to docs/).
func parse(t *testing.T, rel string) ([]block, []link) {
	t.Helper()
	f, err := os.Open(rel)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []block
	var links []link
	var cur *block
	var fence string
	var body []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			if cur == nil {
				cur = &block{file: rel, line: n, info: strings.TrimSpace(m[2])}
				fence, body = m[1], nil
				continue
			}
			if strings.HasPrefix(m[1], fence[:1]) && len(m[1]) >= len(fence) && strings.TrimSpace(m[2]) == "" {
				cur.body = strings.Join(body, "\n")
				parseInfo(t, cur)
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
		}
		if cur != nil {
			body = append(body, line)
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			links = append(links, link{file: rel, line: n, text: m[1], target: m[2]})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Errorf("%s: the code block opened at line %d is never closed", rel, cur.line)
	}
	return blocks, links
}

func parseInfo(t *testing.T, b *block) {
	words := strings.Fields(b.info)
	if len(words) < 2 || words[1] != "runnable" {
		for _, w := range words {
			if w == "runnable" || strings.HasPrefix(w, "needs=") || strings.HasPrefix(w, "timeout=") {
				t.Errorf("%s: %q: write it as ```sh runnable [needs=...] [timeout=...]", b.name(), b.info)
			}
		}
		return
	}
	if words[0] != "sh" && words[0] != "bash" {
		t.Errorf("%s: runnable blocks are sh or bash, not %q", b.name(), words[0])
	}
	b.runnable = true
	for _, w := range words[2:] {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "needs":
			b.needs = strings.Split(v, ",")
			for _, n := range b.needs {
				if !slices.Contains(knownCapabilities, n) {
					t.Errorf("%s: unknown capability %q (known: %s)", b.name(), n, strings.Join(knownCapabilities, ", "))
				}
			}
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				t.Errorf("%s: timeout=%q is not a duration", b.name(), v)
			}
			b.timeout = d
		default:
			t.Errorf("%s: unknown word %q in the info string", b.name(), w)
		}
	}
	if _, _, err := b.expectations(); err != nil {
		t.Error(err)
	}
}

// chapters returns the chapters of one language, by number.
func chapters(t *testing.T, lang string) []chapter {
	t.Helper()
	entries, err := os.ReadDir(lang)
	if err != nil {
		t.Fatalf("docs/%s: %v", lang, err)
	}
	var out []chapter
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".md") {
			continue
		}
		m := chapterRE.FindStringSubmatch(e.Name())
		if m == nil {
			if _, err := os.Stat(e.Name()); err == nil && lang != "en" {
				continue // a translation of the reference page docs/<name>
			}
			if pageRE.MatchString(e.Name()) {
				continue // a walk-through page: see pages
			}
			t.Errorf("docs/%s/%s: chapter files are named NN-lowercase-words.md (or translate a reference page of docs/ under its name)", lang, e.Name())
			continue
		}
		c := chapter{lang: lang, base: e.Name(), num: m[1], path: filepath.Join(lang, e.Name())}
		c.blocks, c.links = parse(t, c.path)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b chapter) int { return strings.Compare(a.base, b.base) })
	return out
}

// pages are the chapters of lang and the walk-through pages beside them
// (docs/en/<name>.md that is no chapter; a reference page's translation is
// not one).
func pages(t *testing.T, lang string) []chapter {
	t.Helper()
	out := chapters(t, lang)
	entries, err := os.ReadDir(lang)
	if err != nil {
		t.Fatalf("docs/%s: %v", lang, err)
	}
	for _, e := range entries {
		if e.IsDir() || !pageRE.MatchString(e.Name()) || chapterRE.MatchString(e.Name()) {
			continue
		}
		if _, err := os.Stat(e.Name()); err == nil {
			continue // a translation of the reference page docs/<name>
		}
		c := chapter{lang: lang, base: e.Name(), path: filepath.Join(lang, e.Name())}
		c.blocks, c.links = parse(t, c.path)
		out = append(out, c)
	}
	return out
}

// TestTranslations: every chapter and page exists in both languages, with the same
// runnable commands and the same links into the code.
func TestTranslations(t *testing.T) {
	en, zh := pages(t, "en"), pages(t, "zh")
	if len(en) == 0 {
		t.Fatal("docs/en has no chapters")
	}
	byBase := map[string]chapter{}
	for _, c := range zh {
		byBase[c.base] = c
	}
	for _, e := range en {
		z, ok := byBase[e.base]
		if !ok {
			t.Errorf("docs/zh/%s is missing (docs/en/%s has no translation)", e.base, e.base)
			continue
		}
		delete(byBase, e.base)
		er, zr := runnable(e.blocks), runnable(z.blocks)
		if len(er) != len(zr) {
			t.Errorf("%s has %d runnable blocks, %s has %d", e.path, len(er), z.path, len(zr))
		}
		for i := range min(len(er), len(zr)) {
			if er[i].normalized() != zr[i].normalized() || !slices.Equal(er[i].needs, zr[i].needs) {
				t.Errorf("runnable block %d differs between the languages:\n%s:\n%s\n%s:\n%s",
					i+1, er[i].name(), er[i].normalized(), zr[i].name(), zr[i].normalized())
			}
		}
		if el, zl := codeTargets(e.links), codeTargets(z.links); !slices.Equal(el, zl) {
			t.Errorf("%s and %s link to different code:\n en: %v\n zh: %v", e.path, z.path, el, zl)
		}
	}
	for base := range byBase {
		t.Errorf("docs/zh/%s has no English original docs/en/%s", base, base)
	}
}

func runnable(bs []block) []block {
	var out []block
	for _, b := range bs {
		if b.runnable {
			out = append(out, b)
		}
	}
	return out
}

// codeTargets lists the distinct links that point outside docs/, sorted.
func codeTargets(ls []link) []string {
	var out []string
	for _, l := range ls {
		if strings.HasPrefix(l.target, "../../") && !slices.Contains(out, l.target) {
			out = append(out, l.target)
		}
	}
	slices.Sort(out)
	return out
}

// TestIndex: docs/README.md links every chapter and page in both languages.
func TestIndex(t *testing.T) {
	_, links := parse(t, "README.md")
	linked := map[string]bool{}
	for _, l := range links {
		linked[strings.SplitN(l.target, "#", 2)[0]] = true
	}
	for _, lang := range langs {
		for _, c := range pages(t, lang) {
			if !linked[lang+"/"+c.base] {
				t.Errorf("docs/README.md does not link %s/%s", lang, c.base)
			}
		}
	}
}

var lineFragRE = regexp.MustCompile(`^L(\d+)(?:-L(\d+))?$`)

var update = flag.Bool("update", false, "TestLinks: move code links whose symbol moved to its nearest new line")

// TestLinks: every relative link resolves; links to lines stay inside the
// file and land on what their text names. When code moved, run
//
//	go test ./docs/ -run TestLinks -update
//
// to move each such link to the nearest line that has its symbol, and
// review the diff.
func TestLinks(t *testing.T) {
	files, err := filepath.Glob("*.md") // README.md and the reference pages
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range langs {
		pages, err := filepath.Glob(filepath.Join(lang, "*.md")) // chapters, and translated reference pages
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, pages...)
	}
	files = append(files, guides["en"], guides["zh"])
	lineCache := map[string][]string{}
	for _, f := range files {
		_, links := parse(t, f)
		moves := map[int][][2]string{} // line of f -> {old target, new target}
		for _, l := range links {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") || strings.HasPrefix(l.target, "#") {
				continue
			}
			path, frag, _ := strings.Cut(l.target, "#")
			full := filepath.Join(filepath.Dir(l.file), path)
			st, err := os.Stat(full)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", l.file, l.line, l.target, err)
				continue
			}
			if frag == "" || st.IsDir() {
				continue
			}
			m := lineFragRE.FindStringSubmatch(frag)
			if m == nil {
				if strings.HasSuffix(path, ".md") && !hasAnchor(t, full, frag) {
					t.Errorf("%s:%d: link %q: %s has no heading or <a id> that makes #%s", l.file, l.line, l.target, path, frag)
				}
				continue
			}
			lines, ok := lineCache[full]
			if !ok {
				b, err := os.ReadFile(full)
				if err != nil {
					t.Fatal(err)
				}
				lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
				lineCache[full] = lines
			}
			from, _ := strconv.Atoi(m[1])
			to := from
			if m[2] != "" {
				to, _ = strconv.Atoi(m[2])
			}
			sym := anchorSymbol(l.text, lines)
			if from < 1 || to < from || to > len(lines) {
				t.Errorf("%s:%d: link %q: %s has %d lines", l.file, l.line, l.target, path, len(lines))
				continue
			}
			if sym == "" {
				continue
			}
			at, nearest := symbolAt(lines, sym, from, to, commentsCount(path))
			if at {
				continue
			}
			if nearest == 0 {
				t.Errorf("%s:%d: link %q names %q, which is nowhere in the code of %s any more (rewrite the sentence for the code as it is)", l.file, l.line, l.target, sym, path)
				continue
			}
			if *update && m[2] == "" {
				moves[l.line] = append(moves[l.line], [2]string{l.target, path + "#L" + strconv.Itoa(nearest)})
				continue
			}
			where := fmt.Sprintf("line %d", from)
			if to != from {
				where = fmt.Sprintf("lines %d-%d", from, to)
			}
			t.Errorf("%s:%d: link %q names %q, which is not on %s of %s but on line %d (go test ./docs/ -run TestLinks -update moves it)",
				l.file, l.line, l.target, sym, where, path, nearest)
		}
		if len(moves) > 0 {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text := strings.Split(string(b), "\n")
			for n, ms := range moves {
				// Two links of one line may trade places (A moves to B's
				// old line, B to A's): park every old target first, then
				// write the new ones, so no move rewrites another's.
				for i, mv := range ms {
					text[n-1] = strings.Replace(text[n-1], "]("+mv[0]+")", fmt.Sprintf("](\x00%d)", i), 1)
				}
				for i, mv := range ms {
					text[n-1] = strings.Replace(text[n-1], fmt.Sprintf("](\x00%d)", i), "]("+mv[1]+")", 1)
					t.Logf("%s:%d: moved %s -> %s", f, n, mv[0], mv[1])
				}
			}
			if err := os.WriteFile(f, []byte(strings.Join(text, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// hasAnchor reports whether a markdown file has the anchor frag: an
// <a id="frag"> or a heading whose GitHub slug is frag (lower case, spaces
// to hyphens, punctuation other than - and _ dropped).
func hasAnchor(t *testing.T, file, frag string) bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if strings.Contains(text, `id="`+frag+`"`) {
		return true
	}
	for _, line := range strings.Split(text, "\n") {
		h, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		h = strings.TrimSpace(strings.TrimLeft(h, "#"))
		var slug strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		if slug.String() == frag {
			return true
		}
	}
	return false
}

// invariantCode is one of the names of docs/invariants.md.
var invariantCode = regexp.MustCompile(`(^|[^#\w.])(I[1-4]|O[1-5]|M[12]|L[1-3]|A[12]|R1|LIN)\b`)

// TestInvariantLinks: every invariant code in a chapter's prose (outside
// code, headings and link texts that already point at it) links its entry
// in invariants.md (docs/zh: the Chinese zh/invariants.md), so a reader is
// one click from what "O4" means.
func TestInvariantLinks(t *testing.T) {
	linked := regexp.MustCompile("`[^`]*`|\\[[^\\]]*\\]\\([^)]*\\)|<[^>]*>")
	for _, lang := range langs {
		for _, c := range chapters(t, lang) {
			b, err := os.ReadFile(c.path)
			if err != nil {
				t.Fatal(err)
			}
			for n, line := range proseLines(string(b)) {
				if strings.HasPrefix(strings.TrimSpace(line), "#") {
					continue
				}
				for _, m := range linked.FindAllString(line, -1) {
					if code := invariantCode.FindStringSubmatch(m); code != nil && strings.HasPrefix(m, "[") &&
						!strings.HasSuffix(m, "invariants.md#"+strings.ToLower(code[2])+")") {
						t.Errorf("%s:%d: %q links somewhere else than invariants.md#%s", c.path, n+1, m, strings.ToLower(code[2]))
					}
				}
				if m := invariantCode.FindStringSubmatch(linked.ReplaceAllString(line, "")); m != nil {
					t.Errorf("%s:%d: %s is not linked: write [%s](%sinvariants.md#%s)", c.path, n+1, m[2], m[2], map[string]string{"en": "../"}[lang], strings.ToLower(m[2]))
				}
			}
		}
	}
}

// commentsCount reports whether a link into this file may land on a
// comment: package documentation, SQL, prose. In other Go files a name that
// survives only in a comment ("reaps every gated product") is not the code
// the link meant, and -update must not move a link there.
func commentsCount(path string) bool {
	return !strings.HasSuffix(path, ".go") || filepath.Base(path) == "doc.go"
}

// symbolAt reports whether sym is on lines from..to (1-based) of a file,
// and the line a link naming it should point at: code before comments (a
// link that drifted onto a doc comment moves to the code it means), and, for
// a bare identifier ("Seckill", "fenced"), its declaration when the file has
// one, else the nearest line that has it. An identifier matches as a whole
// word: "Seckill" is not on a line that only says "SeckillNo".
func symbolAt(lines []string, sym string, from, to int, comments bool) (bool, int) {
	isComment := func(s string) bool {
		t := strings.TrimSpace(s)
		return strings.HasPrefix(t, "//") || strings.HasPrefix(t, "--") || strings.HasPrefix(t, "#") || strings.HasPrefix(t, "*")
	}
	has := func(s string) bool { return strings.Contains(s, sym) }
	var decl *regexp.Regexp
	if identRE.MatchString(sym) {
		word := regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(sym) + `($|[^A-Za-z0-9_])`)
		has = word.MatchString
		if !strings.Contains(sym, ".") {
			q := regexp.QuoteMeta(sym)
			decl = regexp.MustCompile(`^\s*(func\s+(\([^)]*\)\s*)?` + q + `\b|type\s+` + q + `\b|var\s+` + q + `\b|const\s+` + q + `\b|` + q + `\s*(=|:=)\s)`)
		}
	}
	inCode := slices.ContainsFunc(lines, func(s string) bool { return has(s) && !isComment(s) })
	if !inCode && !comments {
		return false, 0
	}
	ok := func(s string) bool { return has(s) && (!inCode || !isComment(s)) }
	if slices.ContainsFunc(lines[from-1:to], ok) {
		return true, from
	}
	nearest := func(match func(string) bool) int {
		n := 0
		for i, s := range lines {
			if match(s) && (n == 0 || abs(i+1-from) < abs(n-from)) {
				n = i + 1
			}
		}
		return n
	}
	if decl != nil {
		if n := nearest(decl.MatchString); n != 0 {
			return false, n
		}
	}
	return false, nearest(ok)
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

var (
	codeSpanRE = regexp.MustCompile("`([^`]+)`")
	fileNameRE = regexp.MustCompile(`^[\w./-]+\.(go|sql|md|sh|json|yml|yaml)$`)
)

// anchorSymbol is what a code link's text names, as it appears in the
// file: its first code span without call parentheses when that occurs in
// the file ("s.markers.Get", "return ErrBusy"), else the span's last dotted
// part ("order.Service.Seckill" -> "Seckill"); "" when the text has no code
// span or names a file.
func anchorSymbol(text string, lines []string) string {
	m := codeSpanRE.FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	s := strings.TrimSpace(m[1])
	if fileNameRE.MatchString(s) {
		return "" // a file name, not a symbol
	}
	inFile := func(sym string) bool {
		return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, sym) })
	}
	if inFile(s) {
		return s
	}
	s = strings.TrimSuffix(s, "()")
	if i := strings.LastIndex(s, "."); i >= 0 && i < len(s)-1 && !strings.ContainsAny(s, " /") {
		s = s[i+1:]
	}
	return s
}

// TestStandsAlone: the repository sends its readers to nothing outside it.
// No tracked file may name the reference material it was first written
// against (the spec and design folders of a sibling "shared" checkout);
// what they held lives in docs/api.md, docs/invariants.md and the README.
func TestStandsAlone(t *testing.T) {
	root := ".."
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files (the test lists the tracked files with git): %v", err)
	}
	// Spelled in pieces so that this file does not match itself.
	bad := regexp.MustCompile(`(\.\./shar` + `ed\b|\bshar` + `ed/(spec|design)\b)`)
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 10 {
		t.Fatalf("git ls-files listed %d files", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the working tree, not yet committed
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := bad.FindString(line); m != "" {
				t.Errorf("%s:%d refers to %q, which is not in this repository (point at docs/api.md, docs/invariants.md or the README instead)", f, i+1, m)
			}
		}
	}
	for _, must := range []string{"api.md", "invariants.md", "glossary.md", "workshop.md"} {
		if _, err := os.Stat(must); err != nil {
			t.Errorf("docs/%s: %v", must, err)
		}
	}
}

// TestOneStartRecipe: the README's Quick start starts the shop exactly as
// the docs' "Before you start" does, so a reader who followed either can
// run the chapters.
func TestOneStartRecipe(t *testing.T) {
	blocks, _ := parse(t, "README.md")
	var recipe string
	for _, b := range blocks {
		if strings.Contains(b.body, "go build -o bin/shop ./cmd/shop") {
			recipe = b.body
			break
		}
	}
	if recipe == "" {
		t.Fatal("docs/README.md has no block that builds bin/shop (terminal 1)")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```sh\n"+recipe+"\n```") {
		t.Errorf("README.md's Quick start does not start the shop as docs/README.md does; it should contain:\n%s", recipe)
	}
	if !strings.Contains(string(readme), "(docs/README.md)") {
		t.Error("README.md does not link docs/README.md")
	}
}

// guides are the instructor guides, by language: they hold the worked
// answers to the chapters' exercises, which the learners' pages only hint at.
var guides = map[string]string{"en": "instructor/guide.md", "zh": "zh/instructor/guide.md"}

// TestExercises: every chapter ends with 3-5 exercises, each with a hint
// folded under it (<details>), and no answer on the learners' page; the
// instructor guide of the same language answers each one, numbered
// "**<chapter>.<exercise>**" under the chapter's heading.
func TestExercises(t *testing.T) {
	heading := map[string]string{"en": "## Exercises", "zh": "## 练习"}
	hint := map[string]string{"en": "<summary>Hint</summary>", "zh": "<summary>提示</summary>"}
	answer := regexp.MustCompile(`<summary>(Answer|答案)`)
	guideHeading := map[string]string{"en": "### Chapter %d\n", "zh": "### 第 %d 章\n"}
	item := regexp.MustCompile(`(?m)^\d+\. `)
	for _, lang := range langs {
		g, err := os.ReadFile(guides[lang])
		if err != nil {
			t.Fatalf("the instructor guide: %v", err)
		}
		guide := string(g)
		for _, c := range chapters(t, lang) {
			b, err := os.ReadFile(c.path)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			if answer.MatchString(text) {
				t.Errorf("%s shows an answer (<summary>Answer</summary>): learners' pages keep hints, answers go to docs/%s", c.path, guides[lang])
			}
			i := strings.Index(text, "\n"+heading[lang]+"\n")
			if i < 0 {
				t.Errorf("%s has no %q section", c.path, heading[lang])
				continue
			}
			section := text[i+1:]
			if j := strings.Index(section[len(heading[lang]):], "\n## "); j >= 0 {
				section = section[:len(heading[lang])+j]
			}
			n, hints := len(item.FindAllString(section, -1)), strings.Count(section, hint[lang])
			if n < 3 || n > 5 {
				t.Errorf("%s: %d exercises, want 3-5", c.path, n)
			}
			if hints != n || strings.Count(section, "<details>") != n {
				t.Errorf("%s: %d exercises but %d hints (<details>%s)", c.path, n, hints, hint[lang])
			}
			num, _ := strconv.Atoi(c.num)
			h := fmt.Sprintf(guideHeading[lang], num)
			k := strings.Index(guide, h)
			if k < 0 {
				t.Errorf("docs/%s has no heading %q for %s", guides[lang], strings.TrimSpace(h), c.path)
				continue
			}
			part := guide[k+len(h):]
			if e := strings.Index(part, "\n### "); e >= 0 {
				part = part[:e]
			}
			got := regexp.MustCompile(`(?m)^\*\*`+strconv.Itoa(num)+`\.(\d+)\*\* `).FindAllStringSubmatch(part, -1)
			var nums, want []string
			for _, m := range got {
				nums = append(nums, m[1])
			}
			for k := 1; k <= n; k++ {
				want = append(want, strconv.Itoa(k))
			}
			if !slices.Equal(nums, want) {
				t.Errorf("docs/%s answers %s's exercises %v, want %v", guides[lang], c.path, nums, want)
			}
		}
	}
}

// TestPlainShell: every runnable block works in a reader's fresh shell. It
// names no variable such a shell lacks ($TMPDIR is unset on most Linux
// desktops; $DOCS_* exist only inside this test) unless it gives a default,
// as ${TMPDIR:-/tmp} does. Scratch space is W=$(mktemp -d).
func TestPlainShell(t *testing.T) {
	bad := regexp.MustCompile(`\$(TMPDIR\b|\{TMPDIR\}|DOCS_\w+|\{DOCS_\w+\})`)
	files := []string{"README.md", "workshop.md", "zh/workshop.md"}
	for _, lang := range langs {
		for _, c := range chapters(t, lang) {
			files = append(files, c.path)
		}
	}
	for _, f := range files {
		blocks, _ := parse(t, f)
		for _, b := range blocks {
			if !strings.HasPrefix(b.info, "sh") && !strings.HasPrefix(b.info, "bash") {
				continue
			}
			for i, l := range strings.Split(b.body, "\n") {
				if m := bad.FindString(l); m != "" {
					t.Errorf("%s:%d: %q: a reader's fresh shell has no such variable (use W=$(mktemp -d), or ${TMPDIR:-/tmp})", f, b.line+1+i, m)
				}
			}
		}
	}
}

// TestPrerequisites: docs/README.md's "Before you start" names every
// program the blocks call, and its Debian/Ubuntu line installs them all.
func TestPrerequisites(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if n := strings.Count(text, aptInstall); n < 2 {
		t.Errorf("docs/README.md should give `%s` in both languages (found %d times)", aptInstall, n)
	}
	for _, tool := range readerTools {
		if tool.program == "bash" {
			continue
		}
		if !strings.Contains(text, "`"+tool.program+"`") {
			t.Errorf("docs/README.md's prerequisites do not name `%s`", tool.program)
		}
		if !strings.Contains(aptInstall, " "+tool.pkg) {
			t.Errorf("the install line does not install %s (for %s)", tool.pkg, tool.program)
		}
	}
}

// TestTempDirsRemoved: a block that makes a scratch file or folder with
// mktemp removes it before it ends, so a pass through the chapters leaves
// nothing behind in /tmp; one kept on purpose says so on its line ("kept",
// 保留) and tells the reader how to remove it.
func TestTempDirsRemoved(t *testing.T) {
	made := regexp.MustCompile(`^(\w+)=\$\(mktemp( -d)?\)(.*)$`)
	for _, lang := range langs {
		for _, c := range chapters(t, lang) {
			blocks, _ := parse(t, c.path)
			for _, b := range blocks {
				if !b.runnable {
					continue
				}
				for i, l := range strings.Split(b.body, "\n") {
					m := made.FindStringSubmatch(l)
					if m == nil || strings.Contains(m[3], "kept") || strings.Contains(m[3], "保留") {
						continue
					}
					if !strings.Contains(b.body, `rm -rf "$`+m[1]+`"`) && !strings.Contains(b.body, `rm -f "$`+m[1]+`"`) {
						t.Errorf("%s:%d: $%s from mktemp is never removed in its block (rm -rf \"$%s\"), or say it is kept", c.path, b.line+1+i, m[1], m[1])
					}
				}
			}
		}
	}
}
