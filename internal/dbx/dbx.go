// Package dbx holds the two database facts every domain package needs:
// running a transaction that the database may pick as a deadlock victim,
// and recognising a unique-index violation. It knows nothing of the shop.
package dbx

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
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
func Tx(ctx context.Context, db *gorm.DB, fn func(tx *gorm.DB) error) error {
	for attempt := 1; ; attempt++ {
		err := db.WithContext(ctx).Transaction(fn)
		if err == nil || attempt == maxAttempts || !Retryable(err) {
			return err
		}
		pause := time.Duration(attempt)*5*time.Millisecond + rand.N(5*time.Millisecond)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
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
