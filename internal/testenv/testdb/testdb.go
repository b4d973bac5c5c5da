// Package testdb gives a test a fresh, migrated MySQL database. It sits
// apart from testenv because it needs platform, whose own tests use testenv.
package testdb

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/testenv"
)

// MigratedMySQL opens a fresh MySQL database with the shop's schema applied;
// it is closed at cleanup.
func MigratedMySQL(t testing.TB) *platform.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	db, err := platform.OpenDB(ctx, testenv.MySQL(t), "", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := platform.Migrate(ctx, db, log); err != nil {
		t.Fatal(err)
	}
	return db
}
