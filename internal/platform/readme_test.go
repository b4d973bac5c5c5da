package platform

import (
	"os"
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
		if strings.HasPrefix(line, "| `SHOP_") {
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
