package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/wire"
)

// TestProblemDetailHidesInnerErrors: a mapped domain error answers with its
// sentinel's text, never the wrapped inner error (issue 11 item 8).
func TestProblemDetailHidesInnerErrors(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("%w: lock lost (dial tcp 10.1.2.3:6379: secret-host)", inventory.ErrBusy)
	p := problemFor(err)
	if p.Code != "busy" || strings.Contains(p.Detail, "secret-host") || strings.Contains(p.Detail, "10.1.2.3") {
		t.Errorf("problem %+v shows the inner error", p)
	}
}

// TestProblemDetailsAreSentences: every mapped domain error's detail is
// written for a person, with no package prefix ("idem: ...") of its sentinel.
func TestProblemDetailsAreSentences(t *testing.T) {
	t.Parallel()
	prefix := regexp.MustCompile(`^[a-z]+: `)
	for _, row := range errorTable {
		p := problemFor(fmt.Errorf("wrapped: %w", row.err))
		if p.Code != row.code || p.Detail == "" || prefix.MatchString(p.Detail) || strings.Contains(p.Detail, row.err.Error()) && prefix.MatchString(row.err.Error()) {
			t.Errorf("%v: code %s, detail %q: want %s and a sentence without a package prefix", row.err, p.Code, p.Detail, row.code)
		}
	}
}

// TestTransportErrorsAreUnavailable: what go-redis, lockx and the database
// driver return when their server cannot answer is 503 unavailable, never
// 500; a plain bug stays 500 (issue 11 item 1).
func TestTransportErrorsAreUnavailable(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, err := range []error{
		fmt.Errorf("idem: claim: %w", refused),
		fmt.Errorf("lockx: acquire %q: %w", "product:1", refused),
		fmt.Errorf("idem: consume token: %w", io.EOF),
		redis.ErrClosed, redis.ErrPoolTimeout, lockx.ErrClosed,
		fmt.Errorf("query: %w", context.DeadlineExceeded),
		errors.New("LOADING Redis is loading the dataset in memory"),
		errors.New("READONLY You can't write against a read only replica."),
		errors.New("CLUSTERDOWN The cluster is down"),
		errors.New("TRYAGAIN Multiple keys request during rehashing of slot"),
		errors.New("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
		errors.New("NOREPLICAS Not enough good replicas to write."),
		errors.New("MOVED 3999 127.0.0.1:6381"),
		errors.New("ASK 3999 127.0.0.1:6381"),
	} {
		if p := problemFor(err); p.Code != "unavailable" || p.Status != 503 {
			t.Errorf("%v: %s %d, want 503 unavailable", err, p.Code, p.Status)
		}
	}
	if p := problemFor(errors.New("nil map")); p.Code != "internal" {
		t.Errorf("a plain error: %s, want internal", p.Code)
	}
}

// A lock that too few replicas acknowledged (SHOP_LOCK_REPLICAS) was not
// taken: the dependency cannot give the promise asked of it, 503.
func TestLockNotReplicatedIsUnavailable(t *testing.T) {
	if p := problemFor(fmt.Errorf("product lock: %w", lockx.ErrNotReplicated)); p.Code != "unavailable" || p.Status != 503 {
		t.Errorf("%s %d, want unavailable 503", p.Code, p.Status)
	}
}

// TestSoldOutAnswersPerPath: the sold_out body, encoded once per path, is
// each path's own (its instance), and every problem keeps its headers: the
// media type, and Retry-After where the code has one.
func TestSoldOutAnswersPerPath(t *testing.T) {
	t.Parallel()
	answer := func(path string, err error) response {
		c, _ := gin.CreateTestContext(httptest.NewRecorder())
		c.Request = httptest.NewRequest(http.MethodPost, path, nil)
		return problemResponse(c, err)
	}
	for range 2 {
		for _, path := range []string{"/api/v1/seckill/1/orders", "/api/v1/seckill/2/orders"} {
			r := answer(path, fmt.Errorf("batch: %w", inventory.ErrSoldOut))
			var p wire.Problem
			if err := json.Unmarshal(r.body, &p); err != nil || p.Code != "sold_out" || p.Status != http.StatusConflict || p.Instance != path || p.Detail != "sold out" {
				t.Errorf("%s: %s (%v); want sold_out, 409, instance %s", path, r.body, err, path)
			}
			if r.status != http.StatusConflict || r.header["Content-Type"] != "application/problem+json" || r.header["Retry-After"] != "" {
				t.Errorf("%s: %d %v", path, r.status, r.header)
			}
		}
	}
	if r := answer("/api/v1/seckill/1/orders", inventory.ErrBusy); r.header["Retry-After"] != "1" || r.header["Content-Type"] != "application/problem+json" {
		t.Errorf("busy: headers %v, want Retry-After 1", r.header)
	}
}
