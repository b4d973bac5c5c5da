package platform

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/seckill-lab/shop/internal/dbx"
)

// Dialects of the database, as the migrations folder names them.
const (
	DialectMySQL  = "mysql"
	DialectSQLite = "sqlite"
)

// DB is the shop's database handle and which dialect it speaks.
type DB struct {
	*gorm.DB
	Dialect string
	dsn     string // MySQL's, normalized
}

// OpenDB opens MySQL/MariaDB when dsn is set, else the SQLite file at path.
func OpenDB(ctx context.Context, dsn, path string, log *slog.Logger) (*DB, error) {
	return OpenDBPool(ctx, dsn, path, 20, log, nil)
}

// OpenDBPool is OpenDB with the MySQL pool size given (SHOP_DB_MAX_CONNS),
// its statements traced when tr is on (nil: off).
func OpenDBPool(ctx context.Context, dsn, path string, maxConns int, log *slog.Logger, tr *Tracing) (*DB, error) {
	cfg := &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true, NowFunc: func() time.Time { return time.Now().UTC() }}
	if dsn != "" {
		norm, err := normalizeMySQLDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("SHOP_MYSQL_DSN: %w", err)
		}
		dial, err := tr.dialector(DialectMySQL, norm)
		if err != nil {
			return nil, err
		}
		g, err := gorm.Open(dial, cfg)
		if err != nil {
			return nil, fmt.Errorf("open mysql: %w", err)
		}
		sqlDB, err := g.DB()
		if err != nil {
			return nil, err
		}
		sqlDB.SetMaxOpenConns(maxConns)
		sqlDB.SetMaxIdleConns(maxConns)
		sqlDB.SetConnMaxLifetime(5 * time.Minute)
		if err := sqlDB.PingContext(ctx); err != nil {
			_ = sqlDB.Close()
			return nil, fmt.Errorf("ping mysql: %w", err)
		}
		if err := dbx.CountTripsOf(g); err != nil {
			return nil, err
		}
		return &DB{DB: g, Dialect: DialectMySQL, dsn: norm}, nil
	}
	// Writers take the file lock when their transaction begins (immediate), so
	// two processes never deadlock upgrading a read to a write; WAL lets
	// readers run beside the writer.
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(15000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	// Turning WAL on takes the file's lock, and SQLite answers "database is
	// locked" at once, without its busy handler, when another process is
	// opening the same file: tried again a few times (seen under load with
	// three migrate commands started at once).
	var g *gorm.DB
	var err error
	for attempt := 1; ; attempt++ {
		var dial gorm.Dialector
		if dial, err = tr.dialector(DialectSQLite, "file:"+path+"?"+q.Encode()); err == nil {
			g, err = gorm.Open(dial, cfg)
		}
		if err == nil || attempt == 10 || !strings.Contains(err.Error(), "database is locked") {
			break
		}
		time.Sleep(time.Duration(attempt) * 20 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	sqlDB, err := g.DB()
	if err != nil {
		return nil, err
	}
	// One writer at a time is all SQLite offers; one connection makes that
	// explicit and keeps the demo free of SQLITE_BUSY storms.
	sqlDB.SetMaxOpenConns(1)
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := dbx.CountTripsOf(g); err != nil {
		return nil, err
	}
	return &DB{DB: g, Dialect: DialectSQLite}, nil
}

// normalizeMySQLDSN makes times come back as UTC time.Time whatever the DSN says.
func normalizeMySQLDSN(dsn string) (string, error) {
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	c.ParseTime = true
	c.Loc = time.UTC
	if c.Params == nil {
		c.Params = map[string]string{}
	}
	if _, ok := c.Params["charset"]; !ok {
		c.Params["charset"] = "utf8mb4"
	}
	if !strings.Contains(dsn, "interpolateParams") && interpolationSafe[c.Params["charset"]] {
		// One round trip per statement instead of prepare, execute and
		// close: under a hot product's lock, round trips are the hold
		// time. The driver escapes; it is unsafe only with multi-byte
		// charsets such as GBK, where it stays off.
		c.InterpolateParams = true
	}
	c.Params["time_zone"] = "'+00:00'"
	if c.Timeout == 0 {
		// A dial to a database behind a partition (SYNs dropped) would
		// otherwise wait out the kernel's retries, about two minutes, where
		// no request deadline bounds it (the pool's background dials, the
		// sweeper). Reads and writes have no driver timeout: every request
		// bounds its calls by its context, and a migration waits up to 60 s
		// for its lock by design.
		c.Timeout = mysqlDialTimeout
	}
	return c.FormatDSN(), nil
}

// mysqlDialTimeout is the driver's dial timeout unless the DSN sets one.
const mysqlDialTimeout = 2 * time.Second

// interpolationSafe are the connection charsets with which client-side
// parameter interpolation cannot be tricked by a multi-byte sequence.
var interpolationSafe = map[string]bool{"utf8mb4": true, "utf8": true, "utf8mb3": true, "latin1": true, "ascii": true, "binary": true}

// Packets opens the pool of a dbx.Writer on the same MySQL database, of at
// most conns connections; nil, nil on SQLite, which has no packets, and on
// a Galera cluster (wsrep_on), where they are not safe: in the failover
// scenario a packet cut by a writer's death left its stock UPDATE committed
// without the ledger and order rows after it (docs chapter 9), which one
// transaction sent statement by statement never does.
func (d *DB) Packets(ctx context.Context, conns int) (*dbx.Writer, error) {
	if d.Dialect != DialectMySQL {
		return nil, nil
	}
	var wsrep sql.NullString
	if err := d.DB.WithContext(ctx).Raw("SELECT @@wsrep_on").Row().Scan(&wsrep); err == nil && (wsrep.String == "1" || strings.EqualFold(wsrep.String, "ON")) { // (MariaDB answers a boolean as 1)
		return nil, nil
	}
	return dbx.OpenWriter(d.dsn, conns)
}

// Close closes the pool.
func (d *DB) Close() error {
	s, err := d.DB.DB()
	if err != nil {
		return err
	}
	return s.Close()
}

// Ping checks the database answers.
func (d *DB) Ping(ctx context.Context) error {
	s, err := d.DB.DB()
	if err != nil {
		return err
	}
	return s.PingContext(ctx)
}
