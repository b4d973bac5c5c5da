package dbx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// A Packet is one transaction sent to MySQL or MariaDB as one round trip:
// START TRANSACTION, a guard, the writes, COMMIT, in one multi-statement
// query. The guard is an UPDATE whose writes count only if it changed
// exactly one row (a conditional stock update: enough stock, the right
// fence); every write after it selects its rows WHERE the guard matched,
// so a packet whose guard missed commits nothing at all, and the caller
// takes its slower path. A write that fails (a duplicate key) stops the
// packet before its COMMIT, and the Writer rolls it back.
//
// The guard is the packet's only read (an UPDATE's WHERE may hold a
// subquery, say a cap on another table), and the packet's transaction is
// READ COMMITTED: that read sees the latest committed rows and locks no
// gaps, where REPEATABLE READ would take shared next-key locks on what it
// read, which concurrent INSERTs would wait on.
//
// The rows of an INSERT are SELECTs joined by UNION ALL, each with the
// guard's condition: plain SQL that MySQL 5.7 and 8 and MariaDB 10.3 and
// later all run (a table value constructor would need VALUES ROW() on
// MySQL and VALUES () on MariaDB).
type Packet struct {
	sql   strings.Builder
	args  []any
	n     int      // statements, the guard's SET included
	heads []string // what each statement is, for Describe
}

// guardVar is the session variable that holds whether the guard matched;
// every packet sets it before any write reads it.
const guardVar = "@dbx_guard"

// NewPacket starts a packet with its guard, an UPDATE with its arguments.
func NewPacket(guard string, args ...any) *Packet {
	p := &Packet{}
	p.add(guard, args...)
	p.add("SET " + guardVar + " = ROW_COUNT()")
	p.heads = append(p.heads, head(guard)+" (the guard)")
	return p
}

func (p *Packet) add(stmt string, args ...any) {
	p.sql.WriteString(stmt)
	p.sql.WriteString(";\n")
	p.args = append(p.args, args...)
	p.n++
}

// Insert adds an INSERT of rows (each with one value per column) into
// table, written only if the guard matched. No RETURNING: the ids are not
// read.
func (p *Packet) Insert(table string, columns []string, rows [][]any) {
	if len(rows) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "INSERT INTO %s (%s) ", table, strings.Join(columns, ", "))
	one := "SELECT ?" + strings.Repeat(", ?", len(columns)-1) + " FROM DUAL WHERE " + guardVar + " = 1"
	var args []any
	for i, r := range rows {
		if len(r) != len(columns) {
			panic(fmt.Sprintf("dbx: packet insert into %s: row %d has %d values for %d columns", table, i, len(r), len(columns)))
		}
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString(one)
		args = append(args, r...)
	}
	p.add(b.String(), args...)
	p.heads = append(p.heads, fmt.Sprintf("INSERT INTO %s (%d rows, if the guard matched)", table, len(rows)))
}

// Describe says what p holds, a statement a line, for traces: "START
// TRANSACTION", the guard's first words, each INSERT's table and rows,
// "COMMIT".
func (p *Packet) Describe() string {
	return "START TRANSACTION\n" + strings.Join(p.heads, "\n") + "\nCOMMIT"
}

// head is a statement's first words: up to its WHERE.
func head(stmt string) string {
	if i := strings.Index(stmt, " WHERE "); i > 0 {
		return stmt[:i] + " WHERE ..."
	}
	return stmt
}

// Statements is how many statements p holds (its guard and the guard's
// SET included), for tests and traces.
func (p *Packet) Statements() int { return p.n }

// A Writer sends packets on a pool of its own, whose connections allow
// multi-statement queries (nothing else uses them: a multi-statement
// connection would run any ";"-joined text it is given).
type Writer struct{ db *sql.DB }

// OpenWriter opens a Writer for the MySQL DSN dsn, with at most conns
// connections. Arguments are interpolated by the driver (a multi-statement
// query cannot be a prepared statement), which refuses to where that is
// unsafe (multi-byte charsets such as GBK): then OpenWriter fails.
func OpenWriter(dsn string, conns int) (*Writer, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	if !cfg.InterpolateParams {
		return nil, errors.New("dbx: a packet writer needs interpolateParams=true in the DSN")
	}
	cfg.MultiStatements = true
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return &Writer{db: db}, nil
}

// Close closes the pool.
func (w *Writer) Close() error { return w.db.Close() }

// ErrGuardMissed is a packet whose guard changed no row: nothing was
// written (its transaction committed empty).
var ErrGuardMissed = errors.New("dbx: the packet's guard matched no row; nothing was written")

// Commit sends p and reports how it ended: nil, it committed with the
// guard matched; ErrGuardMissed; or the database's error, after which
// nothing was committed unless the error is ConnLost or ctx ended (the
// COMMIT may have run: in doubt, as for any transaction).
func (w *Writer) Commit(ctx context.Context, p *Packet) error {
	c, err := w.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	Trip(ctx)
	var rows []int64
	q := "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\nSTART TRANSACTION;\n" + p.sql.String() + "COMMIT"
	err = c.Raw(func(dc any) error {
		args, err := named(p.args)
		if err != nil {
			return err
		}
		res, err := dc.(driver.ExecerContext).ExecContext(ctx, q, args)
		if err != nil {
			return err
		}
		rows = res.(mysql.Result).AllRowsAffected()
		return nil
	})
	if err != nil {
		if !ConnLost(err) && ctx.Err() == nil {
			// Stopped before its COMMIT, its row locks held: roll back on
			// the same connection, within ctx (a slow link must not make
			// the caller late), or drop the connection, which rolls back
			// too.
			if _, rerr := c.ExecContext(ctx, "ROLLBACK"); rerr != nil {
				_ = c.Raw(func(any) error { return driver.ErrBadConn })
			}
		}
		return err
	}
	if len(rows) <= guardAt || rows[guardAt] != 1 {
		return ErrGuardMissed
	}
	return nil
}

// guardAt is the guard's place among the packet's statements: after SET
// TRANSACTION and START TRANSACTION.
const guardAt = 2

// named turns args into the driver's arguments, as database/sql would
// (ints to int64, a nil pointer to NULL, a pointer to its value).
func named(args []any) ([]driver.NamedValue, error) {
	out := make([]driver.NamedValue, len(args))
	for i, a := range args {
		v, err := driver.DefaultParameterConverter.ConvertValue(a)
		if err != nil {
			return nil, fmt.Errorf("dbx: packet argument %d: %w", i+1, err)
		}
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return out, nil
}
