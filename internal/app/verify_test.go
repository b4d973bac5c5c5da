// `shop verify` end to end through app.Run, the
// way the binary and the load-test harness call it.
package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/app"
	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/testenv"
)

func noEnv(string) string { return "" }

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := app.Run(context.Background(), args, noEnv, &out, &errb)
	if err != nil {
		code = app.ExitCode(err)
		errb.WriteString(err.Error())
	}
	return code, out.String(), errb.String()
}

func TestVerify(t *testing.T) {
	t.Parallel()
	for _, be := range []struct {
		name string
		flag func(t *testing.T) []string
	}{
		{"mysql", func(t *testing.T) []string { return []string{"--mysql-dsn", testenv.MySQL(t)} }},
		{"sqlite", func(t *testing.T) []string { return []string{"--sqlite-path", filepath.Join(t.TempDir(), "shop.db")} }},
	} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			dbFlags := be.flag(t)
			verify := func(extra ...string) (int, string, string) {
				return run(t, append(append([]string{"verify"}, dbFlags...), extra...)...)
			}

			// A fresh database: verify migrates it and finds nothing wrong.
			if code, out, errs := verify(); code != 0 || !strings.HasSuffix(out, "OK\n") {
				t.Fatalf("empty shop: exit %d\n%s\n%s", code, out, errs)
			}

			ctx := context.Background()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			dsn, path := "", ""
			if dbFlags[0] == "--mysql-dsn" {
				dsn = dbFlags[1]
			} else {
				path = dbFlags[1]
			}
			db, err := platform.OpenDB(ctx, dsn, path, log)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			exec := func(q string, args ...any) {
				t.Helper()
				if err := db.Exec(q, args...).Error; err != nil {
					t.Fatal(err)
				}
			}
			now := time.Now().UTC()
			for _, id := range []int64{1, 2} {
				exec("INSERT INTO products (id, name, price_cents, stock, created_at, updated_at) VALUES (?, 'p', 100, 10, ?, ?)", id, now, now)
				exec("INSERT INTO stock_ledger (product_id, delta, reason, created_at) VALUES (?, 10, 'create', ?)", id, now)
			}
			if code, out, errs := verify(); code != 0 || !strings.Contains(out, "product 2: stock 10, added 10") {
				t.Fatalf("clean shop: exit %d\n%s\n%s", code, out, errs)
			}

			// Product 3 is a naive lab race's, oversold: a lab finding, exit 0;
			// asked for alone it fails as any product.
			exec("INSERT INTO products (id, name, price_cents, stock, created_at, updated_at) VALUES (3, 'Lab race r1 · naive', 100, 0, ?, ?)", now, now)
			exec("INSERT INTO stock_ledger (product_id, delta, reason, created_at) VALUES (3, 1, 'create', ?)", now)
			exec("INSERT INTO lab_products (product_id, stock_strategy, created_at) VALUES (3, 'naive', ?)", now)
			for _, u := range []int64{7, 8} {
				no := "s-lab-" + strconv.FormatInt(u, 10)
				exec(`INSERT INTO orders (order_no, user_id, product_id, quantity, amount_cents, kind, status, created_at, updated_at)
VALUES (?, ?, 3, 1, 100, 'seckill', 'pending', ?, ?)`, no, u, now, now)
				exec("INSERT INTO stock_ledger (product_id, delta, reason, order_no, created_at) VALUES (3, -1, 'order', ?, ?)", no, now)
			}
			exec("UPDATE products SET stock = 0 WHERE id = 3")
			if code, out, errs := verify(); code != 0 || !strings.HasSuffix(out, "OK\n") || !strings.Contains(out, ", raced with naive\n") ||
				!strings.Contains(out, "lab finding I2 product 3:") {
				t.Fatalf("lab oversell only: exit %d\n%s\n%s", code, out, errs)
			}
			if code, out, errs := verify("--product", "3"); code != 1 || !strings.Contains(out, "I2 product 3:") || strings.Contains(out, "lab finding") {
				t.Fatalf("--product 3 (lab): exit %d\n%s\n%s", code, out, errs)
			}

			// Stock changed without a ledger row: I2 and I3 on product 2.
			exec("UPDATE products SET stock = 7 WHERE id = 2")
			code, out, errs := verify()
			if code != 1 || !strings.Contains(out, "I3 product 2:") || !strings.HasSuffix(out, "FAIL: 2 violations\n") {
				t.Fatalf("seeded violation: exit %d\n%s\n%s", code, out, errs)
			}

			// --product before or after the settings; product 1 is clean.
			if code, out, errs := run(t, append([]string{"verify", "--product", "1"}, dbFlags...)...); code != 0 || strings.Contains(out, "product 2") {
				t.Fatalf("--product 1: exit %d\n%s\n%s", code, out, errs)
			}
			code, out, errs = verify("--product=2", "--json")
			var r audit.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.OK || len(r.Products) != 1 || len(r.Violations) != 2 {
				t.Fatalf("--product=2 --json: exit %d err %v\n%s\n%s", code, err, out, errs)
			}
			if code, _, errs := verify("--product", "99"); code != 2 || !strings.Contains(errs, "product not found") {
				t.Fatalf("unknown product: exit %d, stderr %s", code, errs)
			}
			if code, _, _ := verify("--product", "x"); code != 2 {
				t.Fatalf("bad --product: exit %d", code)
			}
		})
	}
}
