package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/seckill-lab/shop/internal/lablock"
	"github.com/seckill-lab/shop/internal/platform"
)

// lab runs the teaching tools: `shop lab lock ...` holds a Redis lock and
// prints its events. The processes of a demo must share one Redis, so it
// takes SHOP_REDIS_URL (a shop started without one logs the URL of its
// in-process Redis: use that).
func lab(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "lock" {
		return errExit{2, errors.New("usage: shop lab lock --key K [--ttl 2s] [--hold 5s] [--watchdog] [--reentrant-depth N] [--wait 10s]")}
	}
	url := getenv("SHOP_REDIS_URL")
	if url == "" {
		return errExit{2, fmt.Errorf("shop lab lock: SHOP_REDIS_URL is unset; the lock must live in a Redis every demo process shares " +
			"(start `shop serve` and export the in-process redis URL it logs, or point at a real Redis)")}
	}
	rdb, err := platform.OpenRedis(url, getenv("SHOP_REDIS_MASTER"), "")
	if err != nil {
		return err
	}
	defer rdb.Close()
	return lablock.Run(ctx, rdb, args, stdout, stderr)
}
