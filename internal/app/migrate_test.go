package app

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/testenv"
)

// TestMigrateCommandConcurrently runs `shop migrate` three times at once, as
// three instances starting together would, against one fresh database.
func TestMigrateCommandConcurrently(t *testing.T) {
	cases := []struct {
		name string
		env  func(t *testing.T) map[string]string
	}{
		{"mysql", func(t *testing.T) map[string]string {
			return map[string]string{"SHOP_MYSQL_DSN": testenv.MySQL(t)}
		}},
		{"sqlite", func(t *testing.T) map[string]string {
			return map[string]string{"SHOP_SQLITE_PATH": filepath.Join(t.TempDir(), "shop.db")}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := tc.env(t)
			getenv := func(k string) string { return env[k] }
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			const n = 3
			var wg sync.WaitGroup
			errs := make([]error, n)
			logs := make([]bytes.Buffer, n)
			for i := range n {
				wg.Go(func() {
					var stdout bytes.Buffer
					errs[i] = Run(ctx, []string{"migrate"}, getenv, &stdout, &logs[i])
				})
			}
			wg.Wait()

			appliedNow := regexp.MustCompile(`applied_now=(\d+)`)
			total := 0
			for i, err := range errs {
				if err != nil {
					t.Errorf("migrate %d: %v\n%s", i, err, logs[i].String())
					continue
				}
				m := appliedNow.FindStringSubmatch(logs[i].String())
				if m == nil {
					t.Errorf("migrate %d did not log applied_now:\n%s", i, logs[i].String())
					continue
				}
				k, _ := strconv.Atoi(m[1])
				total += k
			}

			db, err := platform.OpenDB(ctx, env["SHOP_MYSQL_DSN"], env["SHOP_SQLITE_PATH"], newLogger(platform.Config{LogLevel: "error"}, &bytes.Buffer{}))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var versions, rows int64
			if err := db.Raw("SELECT COUNT(DISTINCT version) FROM schema_migrations").Scan(&versions).Error; err != nil {
				t.Fatal(err)
			}
			if err := db.Raw("SELECT COUNT(*) FROM schema_migrations").Scan(&rows).Error; err != nil {
				t.Fatal(err)
			}
			if versions == 0 || rows != versions {
				t.Errorf("schema_migrations has %d rows for %d versions, want one row per version", rows, versions)
			}
			if int64(total) != versions {
				t.Errorf("the three runs applied %d migrations in all, want each of the %d exactly once", total, versions)
			}
			// A fourth run, after the others, has nothing left to do.
			var log bytes.Buffer
			if err := Run(ctx, []string{"migrate"}, getenv, &bytes.Buffer{}, &log); err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(log.Bytes(), []byte("applied_now=0")) {
				t.Errorf("a repeated migrate applied something:\n%s", log.String())
			}
		})
	}
}
