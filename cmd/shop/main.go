// Command shop is the flash-sale shop: `shop serve` runs the HTTP server,
// `shop migrate` applies the schema, `shop verify` checks the invariants.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/seckill-lab/shop/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(app.ExitCode(err))
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return app.Run(ctx, args, getenv, stdout, stderr)
}
