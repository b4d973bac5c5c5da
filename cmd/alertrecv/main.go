// Command alertrecv is the webhook Alertmanager notifies in CI's watch
// stage (deploy/native.sh --watch): it keeps every notification it is sent
// (Alertmanager's webhook JSON, firing and resolved) in memory and answers
// GET /alerts with them, so the stage can ask whether an alert arrived and
// then resolved.
//
//	alertrecv --addr 127.0.0.1:9095
//	curl -s 127.0.0.1:9095/alerts   # [{"status":"firing","alerts":[...]}, ...]
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
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9095", "listen address (the url of alertmanager.yml's webhook)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: *addr, Handler: &inbox{}, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintln(os.Stderr, "alertrecv: listening on", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "alertrecv:", err)
		os.Exit(1)
	}
}
