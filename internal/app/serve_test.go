package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/wire"
)

// startServe runs `shop serve` in-process through Run, exactly as the binary
// does, on a free loopback port, and returns its base URL once /healthz
// answers. Cleanup cancels the context and waits for Run to return.
func startServe(t *testing.T, env map[string]string) string {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	full := map[string]string{
		"SHOP_ADDR":           addr,
		"SHOP_SWEEP_INTERVAL": "0",
		"SHOP_SHUTDOWN_WAIT":  "2s",
		"SHOP_LOG_LEVEL":      "debug",
		"SHOP_ADMIN_TOKEN":    "test-admin-token-0123456789",
		"SHOP_AUTH_SECRET":    "test-auth-secret-0123456789",
	}
	for k, v := range env {
		full[k] = v
	}
	s := testenv.StartShop(t, Run, testenv.ShopOptions{Getenv: func(k string) string { return full[k] }})
	base := "http://" + addr
	s.Answers(t, 30*time.Second, nil, base+"/healthz")
	return base
}

// do sends a request and returns the status, headers and body.
func do(t *testing.T, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return resp.StatusCode, resp.Header, b
}

func get(t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

func wantProblem(t *testing.T, what string, status int, h http.Header, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	if status != wantStatus {
		t.Errorf("%s: status %d, want %d (body %s)", what, status, wantStatus, body)
	}
	if ct := h.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	var p wire.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", what, body, err)
	}
	if p.Code != wantCode || p.Status != wantStatus || p.Title == "" || p.Type == "" {
		t.Errorf("%s: problem %+v, want code %s status %d with type and title", what, p, wantCode, wantStatus)
	}
}

// chunkedReader hides its length so the client sends the body chunked.
type chunkedReader struct{ r io.Reader }

func (c chunkedReader) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestServeFoundation(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedisServer(t)
	base := startServe(t, map[string]string{
		"SHOP_MYSQL_DSN": testenv.MySQL(t),
		"SHOP_REDIS_URL": rs.URL(),
	})

	t.Run("healthz", func(t *testing.T) {
		status, h, body := get(t, base+"/healthz")
		if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Errorf("/healthz: %d %q %s", status, h.Get("Content-Type"), body)
		}
		if h.Get("X-Request-ID") == "" {
			t.Error("/healthz: no X-Request-ID")
		}
	})
	t.Run("readyz", func(t *testing.T) {
		if status, _, body := get(t, base+"/readyz"); status != http.StatusOK {
			t.Errorf("/readyz: %d %s", status, body)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		status, h, body := get(t, base+"/metrics")
		if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
			t.Errorf("/metrics: %d %q", status, h.Get("Content-Type"))
		}
		if !bytes.Contains(body, []byte("shop_http_requests_total")) {
			t.Errorf("/metrics lacks shop_http_requests_total:\n%.2000s", body)
		}
	})
	t.Run("unknown route", func(t *testing.T) {
		status, h, body := get(t, base+"/no/such/route")
		wantProblem(t, "GET /no/such/route", status, h, body, http.StatusNotFound, "not_found")
	})

	t.Run("body limit", func(t *testing.T) {
		url := base + "/api/v1/auth/token"
		over := bytes.Repeat([]byte("a"), 65536+1)
		for _, tc := range []struct {
			name    string
			body    func() io.Reader
			chunked bool
		}{
			{"content-length", func() io.Reader { return bytes.NewReader(over) }, false},
			{"chunked", func() io.Reader { return chunkedReader{bytes.NewReader(over)} }, true},
			{"chunked far over", func() io.Reader { return chunkedReader{bytes.NewReader(bytes.Repeat(over, 3))} }, true},
		} {
			req, err := http.NewRequest(http.MethodPost, url, tc.body())
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tc.chunked {
				req.ContentLength = -1
			}
			status, h, body := do(t, req)
			wantProblem(t, "POST >64KiB "+tc.name, status, h, body, http.StatusRequestEntityTooLarge, "body_too_large")
		}
		// Exactly the limit is allowed through (whatever the route then says).
		for _, chunked := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(over[:65536])
			if chunked {
				r = chunkedReader{r}
			}
			req, _ := http.NewRequest(http.MethodPost, url, r)
			if chunked {
				req.ContentLength = -1
			}
			if status, _, body := do(t, req); status == http.StatusRequestEntityTooLarge {
				t.Errorf("a body of exactly 65536 bytes (chunked %v) got 413: %s", chunked, body)
			}
		}
	})

	// Last: it stops and restarts the private Redis.
	t.Run("readiness follows redis", func(t *testing.T) {
		rs.Stop()
		start := time.Now()
		status, h, body := get(t, base+"/readyz")
		took := time.Since(start)
		if took >= 2*time.Second {
			t.Errorf("/readyz with Redis down took %s, want < 2s", took)
		}
		t.Logf("/readyz with Redis down answered %d in %s", status, took)
		wantProblem(t, "/readyz with Redis down", status, h, body, http.StatusServiceUnavailable, "not_ready")
		if status, _, _ := get(t, base+"/healthz"); status != http.StatusOK {
			t.Errorf("/healthz with Redis down: %d, want 200 (the process runs)", status)
		}

		rs.Start() // same port
		deadline := time.Now().Add(10 * time.Second)
		for {
			status, _, body := get(t, base+"/readyz")
			if status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz still %d 10s after Redis came back: %s", status, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestServeEmbeddedDefaults is `go run ./cmd/shop` on a fresh machine: no
// MySQL DSN and no Redis URL, so an SQLite file and an in-process Redis.
func TestServeEmbeddedDefaults(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{
		"SHOP_SQLITE_PATH": filepath.Join(t.TempDir(), "shop.db"),
	})
	status, _, body := get(t, base+"/readyz")
	if status != http.StatusOK {
		t.Fatalf("/readyz: %d %s", status, body)
	}
	var r struct {
		Checks map[string]string `json:"checks"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/readyz body %s: %v", body, err)
	}
	for _, name := range []string{"database", "redis"} {
		if r.Checks[name] != "ok" {
			t.Errorf("/readyz check %s = %q, want ok (body %s)", name, r.Checks[name], body)
		}
	}
}

func TestServeRejectsBadConfig(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	getenv := func(k string) string {
		return map[string]string{"SHOP_LOCK_TTL": "abc", "SHOP_SQLITE_PATH": filepath.Join(t.TempDir(), "x.db")}[k]
	}
	err := Run(context.Background(), []string{"serve"}, getenv, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "SHOP_LOCK_TTL") {
		t.Fatalf("err = %v, want it to name SHOP_LOCK_TTL", err)
	}
	if code := ExitCode(err); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
}

func TestRunVersionAndUnknownCommand(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"version"}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("shop %s\n", Version); out.String() != want {
		t.Errorf("version printed %q, want %q", out.String(), want)
	}
	err := Run(context.Background(), []string{"frobnicate"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || ExitCode(err) != 2 {
		t.Errorf("unknown command: err %v exit %d, want exit 2", err, ExitCode(err))
	}
	var ee errExit
	if !errors.As(err, &ee) {
		t.Errorf("unknown command error %T is not an errExit", err)
	}
}

// TestShutdownAnswersRefusedConnections: a connection refused at
// SHOP_MAX_CONNS whose request arrives after shutdown began still gets its
// 503, and Run returns only after it was answered and drained (the
// process would otherwise exit under it and reset it).
func TestShutdownAnswersRefusedConnections(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	env := map[string]string{
		"SHOP_ADDR": addr, "SHOP_SQLITE_PATH": filepath.Join(t.TempDir(), "shop.db"), "SHOP_MAX_CONNS": "1",
		"SHOP_SWEEP_INTERVAL": "0", "SHOP_SHUTDOWN_WAIT": "10s",
		"SHOP_ADMIN_TOKEN": "test-admin-token-0123456789", "SHOP_AUTH_SECRET": "test-auth-secret-0123456789",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	log := &testenv.LogBuffer{}
	go func() {
		done <- Run(ctx, []string{"serve"}, func(k string) string { return env[k] }, &testenv.LogBuffer{}, log)
	}()

	// The one slot, held by a keep-alive connection that was served.
	var held net.Conn
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the shop did not answer /healthz:\n%s", log.String())
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			continue
		}
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: shop\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil && resp.StatusCode == http.StatusOK {
			held = c
			break
		}
		c.Close()
	}
	defer held.Close()
	refused, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	time.Sleep(200 * time.Millisecond) // accepted and refused, waiting for its request

	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a refused connection still waited for its request", err)
	case <-time.After(500 * time.Millisecond):
	}
	_ = refused.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(refused, "POST /api/v1/seckill/1/orders HTTP/1.1\r\nHost: shop\r\nContent-Length: 0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(refused), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("refused connection during shutdown: %v %v, want its 503", resp, err)
	}
	refused.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("Run still running a second after the refused connection was answered and closed")
	}
}
