package deploy

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/app"
)

// exportedMetrics starts a demo shop in-process (SQLite, in-process Redis)
// and returns the metric names its /metrics exposes (a histogram with its
// _bucket, _sum and _count series).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	env := map[string]string{"SHOP_ADMIN_TOKEN": "watch-test-admin-token", "SHOP_LOG_LEVEL": "error"}
	go func() {
		done <- app.Run(ctx, []string{"serve", "--addr", addr, "--sqlite-path", filepath.Join(t.TempDir(), "shop.db"), "--redis-url", ""},
			func(k string) string { return env[k] }, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var body []byte
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo shop's /metrics does not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(string(body), -1) {
		names[m[1]] = true
		if m[2] == "histogram" {
			names[m[1]+"_bucket"], names[m[1]+"_sum"], names[m[1]+"_count"] = true, true, true
		}
	}
	return names
}

// declared reports whether the shop's Go code declares metric name (a
// labelled metric appears on /metrics only once it has a series): some
// split of name into shop_<subsystem>_<name> is written as Subsystem and
// Name literals in one file, or shop_<name> as a Name literal.
func declared(t *testing.T, name string) bool {
	t.Helper()
	rest, ok := strings.CutPrefix(name, "shop_")
	if !ok {
		return false
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if r, ok := strings.CutSuffix(rest, suffix); ok && declared(t, "shop_"+r) {
			return true
		}
	}
	found := false
	err := filepath.WalkDir(filepath.Join("..", "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || found {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		for i := 0; i <= len(rest); i++ {
			if i == 0 && strings.Contains(src, `Name: "`+rest+`"`) {
				found = true
			}
			if i > 0 && i < len(rest) && rest[i] == '_' &&
				strings.Contains(src, `Subsystem: "`+rest[:i]+`", Name: "`+rest[i+1:]+`"`) {
				found = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

var (
	recordRe = regexp.MustCompile(`(?m)^\s*- record: (\S+)$`)
	// Metric names in PromQL: shop_... and k6_... series, and the recorded shop:... ones.
	nameRe = regexp.MustCompile(`\b(shop_[a-z0-9_]+|shop:[a-z0-9_:]+|k6_[a-z0-9_]+)`)
)

// TestWatchQueries holds the rules and the dashboard to what exists: every
// series rules.yml reads is one the shop exports, and every panel of the
// Grafana dashboard reads a recording rule of rules.yml, a series the shop
// exports, or k6's own (k6 -o experimental-prometheus-rw, k6_ prefix).
func TestWatchQueries(t *testing.T) {
	exported := exportedMetrics(t)
	rules := readFile(t, "deploy/prometheus/rules.yml")
	recorded := map[string]bool{}
	for _, m := range recordRe.FindAllStringSubmatch(rules, -1) {
		recorded[m[1]] = true
	}
	if len(recorded) < 10 {
		t.Fatalf("rules.yml records %d series, want the flash sale's ten or more", len(recorded))
	}
	known := func(name string) bool {
		return recorded[name] || exported[name] || strings.HasPrefix(name, "k6_") || declared(t, name)
	}
	for _, name := range nameRe.FindAllString(rules, -1) {
		if !known(name) {
			t.Errorf("rules.yml reads %s, which the shop does not export", name)
		}
	}

	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, "deploy/grafana/dashboards/shop-flash-sale.json")), &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatal("the dashboard has no uid or no panel")
	}
	readsRecorded := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			names := nameRe.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %q reads no known series", p.Title, q.Expr)
			}
			for _, n := range names {
				if !known(n) {
					t.Errorf("panel %q reads %s: neither a recording rule nor a series the shop exports", p.Title, n)
				}
				readsRecorded[n] = true
			}
		}
	}
	for r := range recorded {
		if !readsRecorded[r] {
			t.Errorf("recording rule %s has no panel on the dashboard", r)
		}
	}
}
