package platform

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestREADMEListsEverySetting keeps the README's configuration table from
// rotting: every setting needs a row with its flag and default.
func TestREADMEListsEverySetting(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `SHOP_") || strings.HasPrefix(line, "| `OTEL_") {
			env, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
			rows[env] = line
		}
	}
	for _, s := range Settings() {
		env, flag, def, usage := s[0], s[1], s[2], s[3]
		shownDef := "(empty)"
		if def != "" {
			shownDef = "`" + def + "`"
		}
		want := "| `" + env + "` | `" + flag + "` | " + shownDef + " | " + strings.ReplaceAll(usage, "|", `\|`) + " |"
		row, ok := rows[env]
		if !ok {
			t.Errorf("README.md lacks %s; add this row to the configuration table:\n%s", env, want)
			continue
		}
		if !strings.Contains(row, "`"+flag+"`") || !strings.Contains(row, " "+shownDef+" ") {
			t.Errorf("README.md row of %s is out of date:\n got: %s\nwant: %s", env, row, want)
		}
	}
}

// TestREADMELayout keeps the README's layout true: the first block under
// "## Layout" names every package with its job (and nothing that is gone),
// the second gives each package's imports of the project, read from the
// code, one line per importer, each line above the packages it imports.
func TestREADMELayout(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := layoutBlocks(t, string(b))
	pkgs := projectPackages(t)

	listed := map[string]bool{}
	for _, line := range blocks[0] {
		path, job, _ := strings.Cut(line, " ")
		if strings.TrimSpace(job) == "" {
			t.Errorf("README layout: %q says no job", path)
		}
		if _, err := os.Stat(filepath.Join("../..", path)); err != nil {
			t.Errorf("README layout lists %s, which is not in the repository", path)
		}
		listed[strings.TrimSuffix(path, "/")] = true
	}
	for dir, p := range pkgs {
		if !listed[dir] {
			t.Errorf("README layout lacks %s/; add a line saying its one job", dir)
		}
		if strings.TrimSpace(p.doc) == "" {
			t.Errorf("%s has no package doc comment saying its job", dir)
		}
	}

	// want: short name -> the project packages it imports, from the code.
	short := func(dir string) string { return strings.TrimPrefix(dir, "internal/") }
	want := map[string]string{}
	for dir, p := range pkgs {
		var deps []string
		for _, imp := range p.imports {
			if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
				deps = append(deps, short(rest))
			}
		}
		if len(deps) > 0 {
			slices.Sort(deps)
			want[short(dir)] = strings.Join(deps, " ")
		}
	}
	seen := map[string]int{} // short name -> its line in the arrows block
	for i, line := range blocks[1] {
		from, to, ok := strings.Cut(line, "->")
		from = strings.TrimSpace(from)
		if !ok {
			t.Errorf("README dependency line %q has no ->", line)
			continue
		}
		deps := strings.Fields(to)
		for _, d := range deps {
			if at, ok := seen[d]; ok {
				t.Errorf("README dependencies: %s (line %d) imports %s, which stands above it (line %d); arrows point down", from, i+1, d, at+1)
			}
		}
		seen[from] = i
		slices.Sort(deps)
		got, exp := strings.Join(deps, " "), want[from]
		switch {
		case exp == "":
			t.Errorf("README dependencies: %s imports nothing from the project (or is no package); drop its line", from)
		case got != exp:
			t.Errorf("README dependencies: %s imports %s, the README says %s", from, exp, got)
		}
	}
	for from, exp := range want {
		if _, ok := seen[from]; !ok {
			t.Errorf("README dependencies lack %s -> %s", from, exp)
		}
	}
}

const module = "github.com/seckill-lab/shop"

type pkgInfo struct {
	doc     string
	imports []string
}

// projectPackages is what `go list ./...` says of each package of the
// module, by its folder: its doc comment and its imports (tests' left out).
func projectPackages(t *testing.T) map[string]pkgInfo {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Doc,Imports", "./...")
	cmd.Dir = "../.."
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	pkgs := map[string]pkgInfo{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath, Doc string
			Imports         []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		dir, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			t.Fatalf("go list: %s is outside %s", p.ImportPath, module)
		}
		pkgs[dir] = pkgInfo{doc: p.Doc, imports: p.Imports}
	}
	if len(pkgs) == 0 {
		t.Fatal("go list ./... found no packages")
	}
	return pkgs
}

// layoutBlocks returns the lines of the first two fenced blocks of the
// README's "## Layout" section: the folders, then the dependency arrows.
func layoutBlocks(t *testing.T, readme string) [2][]string {
	t.Helper()
	_, sec, ok := strings.Cut(readme, "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(sec, "\n") {
		switch {
		case strings.HasPrefix(line, "```") && !in:
			in, cur = true, nil
		case strings.HasPrefix(line, "```"):
			in = false
			blocks = append(blocks, cur)
		case in && strings.TrimSpace(line) != "":
			cur = append(cur, strings.TrimSpace(line))
		}
	}
	if len(blocks) < 2 {
		t.Fatalf("README ## Layout has %d fenced blocks, want 2 (folders, then dependency arrows)", len(blocks))
	}
	return [2][]string{blocks[0], blocks[1]}
}
