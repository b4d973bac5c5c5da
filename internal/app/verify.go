package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/platform"
)

// verify checks the invariants against the database (`shop verify [--product
// ID] [--json]`, plus any setting flag). It exits 1 on a violation and 2 on a
// usage error or an unknown product. With the redis-gate strategy and a Redis
// server configured it also compares the gate's counters with the stock (R1).
func verify(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shop verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	product := fs.Int64("product", 0, "check only this product; wallet checks are then left out")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	// --product and --json are verify's own; every other argument is a
	// setting, parsed by LoadConfig.
	var own, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "product" && name != "json") {
			rest = append(rest, a)
			continue
		}
		own = append(own, a)
		if name == "product" && !hasValue && i+1 < len(args) {
			i++
			own = append(own, args[i])
		}
	}
	if err := fs.Parse(own); err != nil {
		return errExit{2, err}
	}
	c, extra, err := platform.LoadConfig("shop verify", rest, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, "\nverify's own flags:")
		fs.PrintDefaults()
	}
	if err != nil {
		return err
	}
	if len(extra) > 0 {
		return errExit{2, fmt.Errorf("verify: unexpected argument %q", extra[0])}
	}
	if *product < 0 {
		return errExit{2, fmt.Errorf("verify: --product must be a product id, got %d", *product)}
	}

	log := newLogger(c, stderr)
	db, err := platform.OpenDB(ctx, c.MySQLDSN, c.SQLitePath, log)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := platform.Migrate(ctx, db, log); err != nil {
		return err
	}
	check := func(ctx context.Context, o audit.Options) (audit.Report, error) { return audit.Check(ctx, db.DB, o) }
	if c.StockStrategy == inventory.RedisGate && c.RedisURL != "" {
		rdb, err := platform.OpenRedis(c.RedisURL, c.RedisMaster, c.EmbeddedRedis)
		if err != nil {
			return err
		}
		defer rdb.Close()
		svc := newServices(c, db, rdb, prometheus.NewRegistry(), log)
		defer svc.close()
		check = svc.audit
	}

	r, err := check(ctx, audit.Options{ProductID: *product})
	if errors.Is(err, audit.ErrNotFound) {
		return errExit{2, fmt.Errorf("verify: --product %d: %w", *product, err)}
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		r.WriteText(stdout)
	}
	if !r.OK {
		return errExit{1, fmt.Errorf("verify: %d invariant violations", len(r.Violations))}
	}
	return nil
}
