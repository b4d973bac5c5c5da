// Package app wires the shop together: it reads the configuration, opens the
// backends and runs one subcommand. cmd/shop's main only calls Run, so tests
// start the whole server in-process exactly as the binary does.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/seckill-lab/shop/internal/platform"
)

// Version is set at build time with -ldflags "-X ...app.Version=v1.2.3".
var Version = "dev"

// errExit carries an exit status other than 1 through Run's error.
type errExit struct {
	code int
	err  error
}

func (e errExit) Error() string { return e.err.Error() }
func (e errExit) Unwrap() error { return e.err }

// ExitCode is the process exit status for an error returned by Run.
func ExitCode(err error) int {
	var e errExit
	if errors.As(err, &e) {
		return e.code
	}
	if errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

const usage = `usage: shop [command] [flags]

commands:
  serve     run the HTTP server (the default)
  migrate   apply the schema, then exit
  verify    check the invariants from the database; exit 1 on a violation
  lab lock  hold a Redis lock and print its events (teaching and tests)
  version   print the version
  help      this text and every setting

Every setting is a flag and an environment variable; flags win.
`

// Run runs one shop command with the OS given as parameters.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, "shop", Version)
		return nil
	case "help":
		fmt.Fprint(stdout, usage+"\nsettings:\n")
		for _, s := range platform.Settings() {
			fmt.Fprintf(stdout, "  %-28s %-26s default %q\n      %s\n", s[0], s[1], s[2], s[3])
		}
		return nil
	case "serve":
		return serve(ctx, args, getenv, stdout, stderr)
	case "migrate":
		return migrate(ctx, args, getenv, stderr)
	case "verify":
		return verify(ctx, args, getenv, stdout, stderr)
	case "lab":
		return lab(ctx, args, getenv, stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return errExit{2, fmt.Errorf("unknown command %q", cmd)}
	}
}

func newLogger(c platform.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// backends opens the database (migrated) and Redis of a configuration,
// both traced when tr is on.
func backends(ctx context.Context, c platform.Config, log *slog.Logger, tr *platform.Tracing) (*platform.DB, *platform.Redis, error) {
	db, err := platform.OpenDBPool(ctx, c.MySQLDSN, c.SQLitePath, c.DBMaxConns, log, tr)
	if err != nil {
		return nil, nil, err
	}
	if _, err := platform.Migrate(ctx, db, log); err != nil {
		db.Close()
		return nil, nil, err
	}
	rdb, err := platform.OpenRedis(c.RedisURL, c.RedisMaster, c.EmbeddedRedis)
	if err == nil {
		err = tr.InstrumentRedis(rdb)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	if c.RedisShareTrips && !rdb.ShareRoundTrips() {
		log.Info("per-request Redis calls go one round trip each on a Cluster or the in-process Redis (SHOP_REDIS_SHARE_TRIPS shares them on a Redis server or a Sentinel group)")
	}
	platform.LogBackends(log, db, rdb, c)
	return db, rdb, nil
}

func migrate(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	c, _, err := platform.LoadConfig("shop migrate", args, getenv, stderr)
	if err != nil {
		return err
	}
	log := newLogger(c, stderr)
	db, err := platform.OpenDB(ctx, c.MySQLDSN, c.SQLitePath, log)
	if err != nil {
		return err
	}
	defer db.Close()
	applied, err := platform.Migrate(ctx, db, log)
	if err != nil {
		return err
	}
	log.Info("schema up to date", "dialect", db.Dialect, "applied_now", len(applied))
	return nil
}
