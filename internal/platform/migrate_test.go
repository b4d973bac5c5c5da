package platform

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/testenv"
)

var discard = slog.New(slog.DiscardHandler)

// backend opens a fresh, empty database of one dialect; each call on the same
// test returns another handle on the same database.
type backend struct {
	name string
	open func(t *testing.T) func(t *testing.T) *DB
}

var backends = []backend{
	{DialectMySQL, func(t *testing.T) func(t *testing.T) *DB {
		dsn := testenv.MySQL(t)
		return func(t *testing.T) *DB { return openTestDB(t, dsn, "") }
	}},
	{DialectSQLite, func(t *testing.T) func(t *testing.T) *DB {
		path := filepath.Join(t.TempDir(), "shop.db")
		return func(t *testing.T) *DB { return openTestDB(t, "", path) }
	}},
}

func openTestDB(t *testing.T, dsn, path string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := OpenDB(ctx, dsn, path, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func allVersions(t *testing.T, dialect string) []int {
	t.Helper()
	files, err := migrationFiles(dialect)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no migrations for %s", dialect)
	}
	var vs []int
	for _, f := range files {
		vs = append(vs, f.version)
	}
	return vs
}

// checkRecorded asserts schema_migrations holds exactly one row per version.
func checkRecorded(t *testing.T, db *DB, want []int) {
	t.Helper()
	var rows []struct {
		Version int
		N       int
	}
	if err := db.Raw("SELECT version, COUNT(*) AS n FROM schema_migrations GROUP BY version ORDER BY version").Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range rows {
		if r.N != 1 {
			t.Errorf("version %d recorded %d times", r.Version, r.N)
		}
		got = append(got, r.Version)
	}
	if !slices.Equal(got, want) {
		t.Errorf("schema_migrations versions = %v, want %v", got, want)
	}
}

func TestMigrateTwiceChangesNothing(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)(t)
			if db.Dialect != b.name {
				t.Fatalf("dialect %q, want %q", db.Dialect, b.name)
			}
			want := allVersions(t, db.Dialect)
			ctx := context.Background()
			applied, err := Migrate(ctx, db, discard)
			if err != nil {
				t.Fatalf("first migrate: %v", err)
			}
			if !slices.Equal(applied, want) {
				t.Errorf("first migrate applied %v, want %v", applied, want)
			}
			applied, err = Migrate(ctx, db, discard)
			if err != nil {
				t.Fatalf("second migrate: %v", err)
			}
			if len(applied) != 0 {
				t.Errorf("second migrate applied %v, want nothing", applied)
			}
			checkRecorded(t, db, want)
			for _, table := range []string{"products", "stock_ledger", "orders", "wallets", "wallet_ledger", "payments"} {
				if !db.Migrator().HasTable(table) {
					t.Errorf("table %s missing after migrate", table)
				}
			}
		})
	}
}

func TestMigrateConcurrently(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			open := b.open(t)
			dbs := []*DB{open(t), open(t), open(t)}
			want := allVersions(t, dbs[0].Dialect)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			applied := make([][]int, len(dbs))
			errs := make([]error, len(dbs))
			for i, db := range dbs {
				wg.Go(func() { applied[i], errs[i] = Migrate(ctx, db, discard) })
			}
			wg.Wait()
			var all []int
			for i, err := range errs {
				if err != nil {
					t.Errorf("migrate %d: %v", i, err)
				}
				all = append(all, applied[i]...)
			}
			slices.Sort(all)
			if !slices.Equal(all, want) {
				t.Errorf("versions applied across the three runs = %v, want each of %v exactly once", all, want)
			}
			checkRecorded(t, dbs[0], want)
		})
	}
}

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	got := splitStatements("-- header\nCREATE TABLE a (\n  x INT -- note\n);\n\n  -- between\nCREATE TABLE b (y INT);\nINSERT INTO b VALUES (1)\n")
	want := []string{"CREATE TABLE a (\n  x INT -- note\n)", "CREATE TABLE b (y INT)", "INSERT INTO b VALUES (1)"}
	if !slices.Equal(got, want) {
		t.Errorf("splitStatements = %q, want %q", got, want)
	}
}

func TestMigrationFilesBothDialects(t *testing.T) {
	t.Parallel()
	mysql, sqlite := allVersions(t, DialectMySQL), allVersions(t, DialectSQLite)
	if !slices.Equal(mysql, sqlite) {
		t.Errorf("mysql versions %v and sqlite versions %v differ: each migration needs both dialects", mysql, sqlite)
	}
	// Two branches that each add the next number merge cleanly as files;
	// the second would then fail to record its version at start.
	if unique := slices.Compact(slices.Clone(mysql)); len(unique) != len(mysql) {
		t.Errorf("migration versions %v: a version is used twice; renumber the later migration", mysql)
	}
}
