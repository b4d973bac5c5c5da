// Package dbx holds the database facts every domain package needs: running
// a transaction that the database may pick as a deadlock victim, recognising
// a unique-index violation, checking an optimistic update, and the clock
// rows are stamped with. It knows nothing of the shop.
package dbx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// maxAttempts bounds how often Tx runs fn.
const maxAttempts = 5

// Tx runs fn in one transaction. When the database aborts it as a deadlock
// victim or after a lock wait timeout (MySQL 1213 and 1205; SQLite BUSY),
// nothing was committed, so fn runs again in a new transaction after a short
// jittered pause. fn must therefore derive everything it writes from what it
// reads inside the transaction.
//
// Every transaction in the shop takes this one shape: the caller opens it
// with a function, and lower packages offer ...Tx functions that take the
// *gorm.DB of the transaction they run in. TxOnce and ReadTx are the same
// shape for a caller that reruns on its own terms and for a consistent read.
func Tx(ctx context.Context, db *gorm.DB, fn func(tx *gorm.DB) error) error {
	for attempt := 1; ; attempt++ {
		err := TxOnce(ctx, db, fn)
		if err == nil || attempt == maxAttempts || !Retryable(err) || !Pause(ctx, attempt) {
			return err
		}
	}
}

// Pause waits before a transaction's next attempt: longer after each, with
// jitter, so two victims of one deadlock do not meet again at once. It
// reports false when ctx ended first.
func Pause(ctx context.Context, attempt int) bool {
	return Sleep(ctx, time.Duration(attempt)*5*time.Millisecond+rand.N(5*time.Millisecond))
}

// Sleep waits d, or until ctx ends (false).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// TxOnce runs fn in one transaction, never again: for a caller whose own
// loop decides what is run again (one retry layer, not two nested).
func TxOnce(ctx context.Context, db *gorm.DB, fn func(tx *gorm.DB) error) error {
	Trip(ctx)       // BEGIN
	defer Trip(ctx) // COMMIT or ROLLBACK
	return db.WithContext(ctx).Transaction(fn)
}

// ReadTx runs fn in one read-only transaction, so every query in it sees the
// same committed state: a repeatable-read snapshot on MySQL/MariaDB (SQLite
// takes no transaction options; its transactions are serializable anyway).
func ReadTx(ctx context.Context, db *gorm.DB, fn func(tx *gorm.DB) error) error {
	if db.Dialector != nil && db.Dialector.Name() == "mysql" {
		return db.WithContext(ctx).Transaction(fn, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	}
	return db.WithContext(ctx).Transaction(fn)
}

// Retryable reports whether err aborted a transaction that may simply be
// run again.
func Retryable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1213 || me.Number == 1205
	}
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

// ConnLost reports whether err is a database connection that broke or was
// closed under the caller (the driver's bad connection, the MySQL driver's
// invalid connection, a connection already returned to the pool): the
// statement did not commit, so the client may send the request again.
func ConnLost(err error) bool {
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, sql.ErrConnDone)
}

// unavailableErrors are the MySQL/MariaDB server errors that say the
// database cannot take the statement now but may in a moment: a server
// turned read-only under the client (1290 ER_OPTION_PREVENTS_STATEMENT,
// 1836 ER_READ_ONLY_MODE: a demoted primary, or a proxy still pointing at a
// replica during a failover), a Galera node outside the primary component
// (1047 ER_UNKNOWN_COM_ERROR, "WSREP has not yet prepared node"), an abort
// a retry layer gave up on (1213 deadlock or Galera certification conflict,
// 1205 lock wait timeout), a server shutting down or killing the connection
// (1053, 1927, 1317), too many connections (1040), a statement timeout
// (1969).
var unavailableErrors = map[uint16]bool{1290: true, 1836: true, 1047: true, 1213: true, 1205: true,
	1053: true, 1927: true, 1317: true, 1040: true, 1969: true}

// Unavailable reports whether err is the database unable to answer now:
// a lost connection (ConnLost) or one of unavailableErrors. Whatever the
// request wrote either rolled back or, for a connection lost during
// COMMIT, is in doubt; the client may send the request again, and the
// idempotency of the write (the unique order number, the payment's request
// id) makes that retry safe either way. HTTP answers it 503, never 500.
func Unavailable(err error) bool {
	if ConnLost(err) {
		return true
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && unavailableErrors[me.Number]
}

// IsDuplicate reports whether err is a unique-index violation (MySQL 1062,
// SQLite UNIQUE constraint).
func IsDuplicate(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return true
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1062
	}
	return strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// Now is the clock rows are stamped with: UTC at the microsecond the
// database keeps, so a response rendered now and one rendered from the row
// later are identical.
func Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// ErrVersionConflict means an optimistic update matched no row: someone
// else changed the row since it was read (or it is gone). Re-read and
// decide again; do not blindly retry the same write.
var ErrVersionConflict = errors.New("dbx: version conflict")

// CheckRows turns the affected-row count of an optimistic update into an
// error. The pattern, safe to run twice because the second run matches
// nothing:
//
//	UPDATE account SET balance = balance - 100, version = version + 1
//	WHERE id = ? AND version = ?
//
// With gorm: CheckRows(db.Model(&a).Where("id = ? AND version = ?", a.ID,
// a.Version).Updates(...).RowsAffected), after checking the Error. The
// version must change on every update, so MySQL's "rows changed" count is
// the "rows matched" count.
func CheckRows(rows int64) error {
	if rows == 0 {
		return ErrVersionConflict
	}
	return nil
}

// Trips counts the database round trips of one piece of work (a batch's
// turn under a product lock), for its metrics: every statement gorm sends
// under a context that carries it (CountTrips), the BEGIN and the COMMIT or
// ROLLBACK of TxOnce, and each packet.
type Trips struct{ n atomic.Int64 }

type tripsKey struct{}

// CountTrips returns ctx carrying t: statements run under it count in t.
func CountTrips(ctx context.Context, t *Trips) context.Context {
	return context.WithValue(ctx, tripsKey{}, t)
}

// N is how many round trips t counted.
func (t *Trips) N() int64 { return t.n.Load() }

// Trip counts one round trip in the Trips ctx carries, if any.
func Trip(ctx context.Context) {
	if t, ok := ctx.Value(tripsKey{}).(*Trips); ok {
		t.n.Add(1)
	}
}

// CountTripsOf makes db count its statements in the Trips of their
// context: once per database, at start.
func CountTripsOf(db *gorm.DB) error {
	count := func(tx *gorm.DB) { Trip(tx.Statement.Context) }
	cb := db.Callback()
	for _, err := range []error{
		cb.Query().After("gorm:query").Register("dbx:trips", count),
		cb.Create().After("gorm:create").Register("dbx:trips", count),
		cb.Update().After("gorm:update").Register("dbx:trips", count),
		cb.Delete().After("gorm:delete").Register("dbx:trips", count),
		cb.Row().After("gorm:row").Register("dbx:trips", count),
		cb.Raw().After("gorm:raw").Register("dbx:trips", count),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Insert writes rows (one value per column each) into table in one
// multi-row INSERT, without RETURNING: for rows whose ids are never read.
func Insert(tx *gorm.DB, table string, columns []string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	one := "(?" + strings.Repeat(", ?", len(columns)-1) + ")"
	args := make([]any, 0, len(rows)*len(columns))
	for _, r := range rows {
		args = append(args, r...)
	}
	q := "INSERT INTO " + table + " (" + strings.Join(columns, ", ") + ") VALUES " + one + strings.Repeat(", "+one, len(rows)-1)
	return tx.Exec(q, args...).Error
}
