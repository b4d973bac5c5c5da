// Package testdb gives a test a migrated shop database. It sits apart from
// testenv because it needs platform, whose own tests use testenv.
package testdb

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/testenv"
)

// Open opens the MySQL database at dsn, or the SQLite file at path when dsn
// is empty, and applies the schema; it is closed at cleanup.
func Open(t testing.TB, dsn, path string) *platform.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	db, err := platform.OpenDB(ctx, dsn, path, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := platform.Migrate(ctx, db, log); err != nil {
		t.Fatal(err)
	}
	return db
}

// MigratedMySQL is a fresh MySQL database with the schema applied.
func MigratedMySQL(t testing.TB) *platform.DB { return Open(t, testenv.MySQL(t), "") }

// MigratedSQLite is a fresh SQLite file with the schema applied.
func MigratedSQLite(t testing.TB) *platform.DB {
	return Open(t, "", filepath.Join(t.TempDir(), "shop.db"))
}
