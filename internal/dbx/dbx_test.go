package dbx

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestCheckRows(t *testing.T) {
	t.Parallel()
	if err := CheckRows(0); err != ErrVersionConflict {
		t.Errorf("CheckRows(0) = %v, want ErrVersionConflict", err)
	}
	if err := CheckRows(1); err != nil {
		t.Errorf("CheckRows(1) = %v, want nil", err)
	}
}

func TestConnLost(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("query: %w", driver.ErrBadConn), true},
		{mysql.ErrInvalidConn, true},
		{fmt.Errorf("commit: %w", sql.ErrConnDone), true},
		{sql.ErrNoRows, false},
		{&mysql.MySQLError{Number: 1062}, false},
		{nil, false},
	} {
		if got := ConnLost(tt.err); got != tt.want {
			t.Errorf("ConnLost(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("insert order: %w", &mysql.MySQLError{Number: 1290, Message: "The MariaDB server is running with the --read-only option so it cannot execute this statement"}), true},
		{&mysql.MySQLError{Number: 1836, Message: "Running in read-only mode"}, true},
		{&mysql.MySQLError{Number: 1047, Message: "WSREP has not yet prepared node for application use"}, true},
		{fmt.Errorf("commit: %w", &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}), true},
		{&mysql.MySQLError{Number: 1205}, true},
		{&mysql.MySQLError{Number: 1927, Message: "Connection was killed"}, true},
		{fmt.Errorf("query: %w", driver.ErrBadConn), true},
		{mysql.ErrInvalidConn, true},
		{&mysql.MySQLError{Number: 1062}, false}, // a duplicate is an answer, not an outage
		{&mysql.MySQLError{Number: 1146}, false}, // no such table: a bug, 500
		{sql.ErrNoRows, false},
		{nil, false},
	} {
		if got := Unavailable(tt.err); got != tt.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
