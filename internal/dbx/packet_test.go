package dbx_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/testenv"
)

// TestPacketWritesOnlyWhenItsGuardMatched: one round trip commits the
// guard's UPDATE and the INSERTs after it; a guard that misses writes
// nothing; a duplicate key rolls the whole packet back.
func TestPacketWritesOnlyWhenItsGuardMatched(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQL(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.InterpolateParams = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE stock (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
		"CREATE TABLE taken (no VARCHAR(20) PRIMARY KEY, q BIGINT NOT NULL, note VARCHAR(20) NULL)",
		"INSERT INTO stock VALUES (1, 5)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	w, err := dbx.OpenWriter(cfg.FormatDSN(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	take := func(n int64, nos ...string) error {
		p := dbx.NewPacket("UPDATE stock SET n = n - ? WHERE id = 1 AND n >= ?", n, n)
		var rows [][]any
		var note *string
		for _, no := range nos {
			rows = append(rows, []any{no, 1, note})
		}
		p.Insert("taken", []string{"no", "q", "note"}, rows)
		return w.Commit(ctx, p)
	}
	state := func() (stock, taken int64) {
		t.Helper()
		if err := db.QueryRowContext(ctx, "SELECT n, (SELECT COUNT(*) FROM taken) FROM stock").Scan(&stock, &taken); err != nil {
			t.Fatal(err)
		}
		return stock, taken
	}

	if err := take(2, "a", "b"); err != nil {
		t.Fatalf("a packet whose guard matches: %v", err)
	}
	if s, n := state(); s != 3 || n != 2 {
		t.Fatalf("after one packet: stock %d, %d rows; want 3, 2", s, n)
	}
	if err := take(4, "c", "d", "e", "f"); !errors.Is(err, dbx.ErrGuardMissed) {
		t.Fatalf("a packet asking more than the stock: %v, want ErrGuardMissed", err)
	}
	if s, n := state(); s != 3 || n != 2 {
		t.Fatalf("after a missed guard: stock %d, %d rows; want nothing written (3, 2)", s, n)
	}
	if err := take(2, "g", "a"); !dbx.IsDuplicate(err) {
		t.Fatalf("a packet repeating an order number: %v, want a duplicate key", err)
	}
	if s, n := state(); s != 3 || n != 2 {
		t.Fatalf("after a duplicate: stock %d, %d rows; want it rolled back (3, 2)", s, n)
	}
	for range 3 { // the pool's connections carry no transaction over
		if err := take(1, "h"+testenv.Random(3)); err != nil {
			t.Fatalf("a packet after the rolled-back one: %v", err)
		}
	}
	if s, n := state(); s != 0 || n != 5 {
		t.Fatalf("at the end: stock %d, %d rows; want 0, 5", s, n)
	}
}
