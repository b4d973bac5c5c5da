// Command otlprecv receives OpenTelemetry traces over OTLP/HTTP and keeps
// them in memory (internal/otlprecv): CI's watch stage points the shops at
// it and asks it for the traces that Prometheus' exemplars name.
//
//	otlprecv --addr 127.0.0.1:4318
//	curl -s 127.0.0.1:4318/api/traces/<trace id>
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/seckill-lab/shop/internal/otlprecv"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4318", "listen address (OTLP/HTTP's port is 4318)")
	maxSpans := flag.Int("max-spans", 1_000_000, "spans kept; the oldest go first")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: *addr, Handler: &otlprecv.Receiver{MaxSpans: *maxSpans}, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintln(os.Stderr, "otlprecv: listening on", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "otlprecv:", err)
		os.Exit(1)
	}
}
