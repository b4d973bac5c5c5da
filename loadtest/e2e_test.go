package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/testenv"
)

// TestRaceEndToEnd runs the harness as CI does, small: it builds the shop,
// starts three instances on a fresh MariaDB/MySQL database and Redis, races
// 300 buyers for 30 units and must find every invariant intact.
func TestRaceEndToEnd(t *testing.T) {
	dsn := testenv.MySQL(t) // the harness makes its own database from this server
	RedisURL, _ := testenv.Redis(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out bytes.Buffer
	code := run(ctx, []string{"--scenario", "race", "--users", "300", "--stock", "30", "--instances", "3", "--concurrency", "64",
		"--mysql-dsn", dsn, "--redis-url", RedisURL, "--report", dir}, func(string) string { return "" }, &out, &out)
	if code != 0 {
		t.Fatalf("loadtest exited %d:\n%s", code, out.String())
	}
	for _, want := range []string{"database: 30 orders (paid 0) holding 30 units", "oversold 0", "violations: 0", "race     PASS", "linear:   linearizable"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte("<svg")) || bytes.Contains(html, []byte("<script src")) {
		t.Error("report.html should hold inline SVG charts and load nothing from elsewhere")
	}
	if _, err := os.Stat(filepath.Join(dir, "report.json")); err != nil {
		t.Error(err)
	}
	// porcupine's picture of the (small, passing) history, linked from the report.
	pics, _ := filepath.Glob(filepath.Join(dir, "linear-race-p*.html"))
	if len(pics) != 1 || !bytes.Contains(html, []byte(filepath.Base(pics[0]))) {
		t.Errorf("want one picture linear-race-p*.html linked from report.html, got %v", pics)
	}
}
