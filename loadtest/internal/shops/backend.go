package shops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/topo"
)

// backend is the database and Redis of one scenario run: a fresh MySQL
// database (or SQLite file) and a Redis key prefix of its own, on a shared,
// private or in-process Redis.
type Backend struct {
	ServerDSN  string // MySQL server DSN the run's database was created from
	dsn        string // the run's database ("" with SQLite)
	DbName     string
	SqlitePath string
	RedisURL   string
	Prefix     string
	RedisKind  string // "shared", "private" (redis-server started here) or "embedded" (miniredis in this process)
	Private    *topo.Redis
	Mini       *miniredis.Miniredis
	Keep       bool
	Db         *platform.DB
	Log        *slog.Logger
}

// backendOptions say where a scenario's backend lives.
type BackendOptions struct {
	MysqlDSN   string // server DSN (a database name in it is ignored); "" uses SQLite
	RedisURL   string // shared Redis; "" starts one (private when wantPrivate and redis-server exists, else in-process)
	Private    bool   // the scenario needs a Redis it may restart and flush
	Workdir    string
	Keep       bool
	ScenarioID string
}

func NewBackend(ctx context.Context, o BackendOptions, log *slog.Logger) (*Backend, error) {
	b := &Backend{Keep: o.Keep, Log: log, Prefix: "lt" + loadgen.RandomID(4) + ":"}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	if o.MysqlDSN != "" {
		cfg, err := gomysql.ParseDSN(o.MysqlDSN)
		if err != nil {
			return nil, fmt.Errorf("--mysql-dsn / SHOP_MYSQL_DSN: %w", err)
		}
		cfg.DBName = ""
		b.ServerDSN = cfg.FormatDSN()
		b.DbName = "loadtest_" + loadgen.RandomID(5)
		admin, err := sql.Open("mysql", b.ServerDSN)
		if err != nil {
			return nil, err
		}
		_, err = admin.ExecContext(ctx, "CREATE DATABASE "+b.DbName+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
		admin.Close()
		if err != nil {
			return nil, fmt.Errorf("create database %s: %w", b.DbName, err)
		}
		cfg.DBName = b.DbName
		cfg.ParseTime = true
		cfg.Loc = time.UTC
		b.dsn = cfg.FormatDSN()
	} else {
		b.SqlitePath = filepath.Join(o.Workdir, o.ScenarioID+".db")
	}
	db, err := platform.OpenDB(ctx, b.dsn, b.SqlitePath, log)
	if err != nil {
		return nil, err
	}
	b.Db = db
	if _, err := platform.Migrate(ctx, db, log); err != nil {
		return nil, err
	}

	switch {
	case o.RedisURL != "" && !o.Private:
		b.RedisURL, b.RedisKind = o.RedisURL, "shared"
	case topo.RedisInstalled():
		p, err := topo.StartRedis(ctx, filepath.Join(o.Workdir, o.ScenarioID+"-redis"))
		if err != nil {
			return nil, err
		}
		b.Private, b.RedisURL, b.RedisKind = p, p.URL(), "private"
	default:
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // real expiry: lock and idempotency leases must run out
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("in-process redis: %w", err)
		}
		b.Mini, b.RedisURL, b.RedisKind = m, "redis://"+m.Addr()+"/0", "embedded"
	}
	ok = true
	return b, nil
}

func (b *Backend) Describe() string {
	db := "SQLite " + b.SqlitePath
	if b.dsn != "" {
		db = "MySQL/MariaDB database " + b.DbName
	}
	r := map[string]string{"shared": "shared Redis (prefix " + b.Prefix + ")", "private": "private redis-server " + b.RedisURL,
		"embedded": "in-process Redis (miniredis) " + b.RedisURL}[b.RedisKind]
	return db + " + " + r
}

// env is the part of a shop's environment that names this backend.
func (b *Backend) Env() []string {
	e := []string{"SHOP_REDIS_URL=" + b.RedisURL, "SHOP_REDIS_PREFIX=" + b.Prefix}
	if b.dsn != "" {
		return append(e, "SHOP_MYSQL_DSN="+b.dsn)
	}
	return append(e, "SHOP_SQLITE_PATH="+b.SqlitePath)
}

// redisClient is a client of this backend's Redis.
func (b *Backend) RedisClient() (*redis.Client, error) {
	opt, err := redis.ParseURL(b.RedisURL)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// restartRedis restarts a private or in-process Redis (all data lost).
func (b *Backend) RestartRedis(ctx context.Context) error {
	switch {
	case b.Private != nil:
		return b.Private.Restart(ctx)
	case b.Mini != nil:
		addr := b.Mini.Addr()
		b.Mini.Close()
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // real expiry: lock and idempotency leases must run out
		if err := m.StartAddr(addr); err != nil {
			return err
		}
		b.Mini = m
		return nil
	}
	return errors.New("the shared Redis is never restarted")
}

// flushRedis empties a private or in-process Redis.
func (b *Backend) FlushRedis(ctx context.Context) error {
	switch {
	case b.Private != nil:
		c, err := b.RedisClient()
		if err != nil {
			return err
		}
		defer c.Close()
		return c.FlushAll(ctx).Err()
	case b.Mini != nil:
		b.Mini.FlushAll()
		return nil
	}
	return errors.New("the shared Redis is never flushed")
}

func (b *Backend) Close() {
	if b.Db != nil {
		b.Db.Close()
	}
	if b.RedisKind == "shared" && !b.Keep {
		if c, err := b.RedisClient(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			iter := c.Scan(ctx, 0, b.Prefix+"*", 1000).Iterator()
			var keys []string
			for iter.Next(ctx) {
				if keys = append(keys, iter.Val()); len(keys) == 500 {
					c.Del(ctx, keys...)
					keys = keys[:0]
				}
			}
			if len(keys) > 0 {
				c.Del(ctx, keys...)
			}
			cancel()
			c.Close()
		}
	}
	if b.Private != nil {
		b.Private.Close()
	}
	if b.Mini != nil {
		b.Mini.Close()
	}
	if b.DbName != "" && !b.Keep {
		if Admin, err := sql.Open("mysql", b.ServerDSN); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = Admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+b.DbName)
			cancel()
			Admin.Close()
		}
	}
}

// DSN is the run's MySQL database DSN ("" with SQLite).
func (b *Backend) DSN() string { return b.dsn }
