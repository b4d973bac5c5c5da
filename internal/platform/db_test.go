package platform

import (
	"context"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/shop/internal/testenv"
)

func TestNormalizeMySQLDSN(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, charset string
		interpolate       bool
	}{
		{"bare", "root@tcp(127.0.0.1:3306)/shop", "utf8mb4", true},
		{"local time asked", "root:pw@tcp(db:3306)/shop?parseTime=false&loc=Local", "utf8mb4", true},
		{"charset kept", "root@tcp(db:3306)/shop?charset=utf8", "utf8", true},
		{"interpolation refused", "root@tcp(db:3306)/shop?interpolateParams=false", "utf8mb4", false},
		{"multi-byte charset", "root@tcp(db:3306)/shop?charset=gbk", "gbk", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := normalizeMySQLDSN(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			c, err := gomysql.ParseDSN(out)
			if err != nil {
				t.Fatalf("normalized DSN %q does not parse: %v", out, err)
			}
			if !c.ParseTime || c.Loc != time.UTC {
				t.Errorf("%q: parseTime %v loc %v, want true and UTC", out, c.ParseTime, c.Loc)
			}
			if c.Params["charset"] != tt.charset {
				t.Errorf("%q: charset %q, want %q", out, c.Params["charset"], tt.charset)
			}
			if c.InterpolateParams != tt.interpolate {
				t.Errorf("%q: interpolateParams %v, want %v", out, c.InterpolateParams, tt.interpolate)
			}
			if c.Timeout != mysqlDialTimeout {
				t.Errorf("%q: dial timeout %s, want %s", out, c.Timeout, mysqlDialTimeout)
			}
			if c.Params["time_zone"] != "'+00:00'" {
				t.Errorf("%q: time_zone %q, want '+00:00'", out, c.Params["time_zone"])
			}
			in, _ := gomysql.ParseDSN(tt.in)
			if c.User != in.User || c.Passwd != in.Passwd || c.Addr != in.Addr || c.DBName != in.DBName {
				t.Errorf("%q lost the connection details of %q", out, tt.in)
			}
		})
	}
	if _, err := normalizeMySQLDSN("not a dsn"); err == nil {
		t.Error("a malformed DSN was accepted")
	}
}

func TestOpenDBBadDSNNamesVariable(t *testing.T) {
	t.Parallel()
	_, err := OpenDB(context.Background(), "not a dsn", "", discard)
	if err == nil || !strings.Contains(err.Error(), "SHOP_MYSQL_DSN") {
		t.Fatalf("err = %v, want it to name SHOP_MYSQL_DSN", err)
	}
}

// TestOpenDBMySQLSessionIsUTC checks the normalisation on a real server:
// the session runs in UTC and DATETIMEs come back as UTC time.Time, whatever
// the DSN asked for.
func TestOpenDBMySQLSessionIsUTC(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQL(t)
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c.Loc = time.Local
	c.ParseTime = false
	db := openTestDB(t, c.FormatDSN(), "")
	if db.Dialect != DialectMySQL {
		t.Fatalf("dialect %q", db.Dialect)
	}
	var tz string
	if err := db.Raw("SELECT @@session.time_zone").Scan(&tz).Error; err != nil {
		t.Fatal(err)
	}
	if tz != "+00:00" {
		t.Errorf("session time_zone = %q, want +00:00", tz)
	}
	var ts time.Time
	if err := db.Raw("SELECT CAST('2026-01-02 03:04:05.123456' AS DATETIME(6))").Row().Scan(&ts); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC); !ts.Equal(want) || ts.Location() != time.UTC {
		t.Errorf("DATETIME came back as %v, want %v", ts, want)
	}
	if err := db.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestOpenDBSQLite(t *testing.T) {
	t.Parallel()
	db := openTestDB(t, "", t.TempDir()+"/demo.db")
	if db.Dialect != DialectSQLite {
		t.Fatalf("dialect %q", db.Dialect)
	}
	var mode string
	if err := db.Raw("PRAGMA journal_mode").Scan(&mode).Error; err != nil {
		t.Fatal(err)
	}
	if !strings.EqualFold(mode, "wal") {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	if err := db.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}
