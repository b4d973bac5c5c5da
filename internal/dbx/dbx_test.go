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
