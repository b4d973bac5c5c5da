package idem

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// shop is a middleware-wrapped order handler for the tests. Each run
// answers with a new order number, so a second run cannot pass for a replay.
type shop struct {
	h    http.Handler
	runs atomic.Int32
	// status is what the handler answers (default 201); panic if 0 > status.
	status int
	// block, when set, holds the handler until it is closed.
	block chan struct{}
	// bodies the handler read.
	mu     sync.Mutex
	bodies []string
	errs   []error
}

func newShop(t *testing.T, so StoreOptions, mo MiddlewareOptions) *shop {
	t.Helper()
	sh := &shop{status: http.StatusCreated}
	if mo.Principal == nil {
		mo.Principal = func(r *http.Request) string { return r.Header.Get("X-User") }
	}
	mo.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
		sh.mu.Lock()
		sh.errs = append(sh.errs, err)
		sh.mu.Unlock()
		defaultOnError(w, r, err)
	}
	sh.h = Middleware(newTestStore(t, so), mo)(http.HandlerFunc(sh.serve))
	return sh
}

func (sh *shop) serve(w http.ResponseWriter, r *http.Request) {
	n := sh.runs.Add(1)
	b, _ := io.ReadAll(r.Body)
	sh.mu.Lock()
	sh.bodies = append(sh.bodies, string(b))
	sh.mu.Unlock()
	if sh.block != nil {
		<-sh.block
	}
	switch {
	case sh.status < 0:
		panic("handler exploded")
	case sh.status >= 400:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(sh.status)
		fmt.Fprintf(w, `{"status":%d,"code":"insufficient_stock","detail":"run %d"}`, sh.status, n)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/api/v1/orders/R%d", n))
		w.Header().Set("X-Not-Kept", "x")
		w.WriteHeader(sh.status)
		fmt.Fprintf(w, `{"order_no":"R%d","quantity":2}`, n)
	}
}

func (sh *shop) lastErr() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.errs) == 0 {
		return nil
	}
	return sh.errs[len(sh.errs)-1]
}

// send posts body as user with the given Idempotency-Key header values.
func (sh *shop) send(user, body string, keys ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/orders", strings.NewReader(body))
	r.Header.Set("X-User", user)
	for _, k := range keys {
		r.Header.Add(HeaderKey, k)
	}
	w := httptest.NewRecorder()
	sh.h.ServeHTTP(w, r)
	return w
}

const orderBody = `{"product_id":7,"quantity":2}`

func assertReplay(t *testing.T, first, again *httptest.ResponseRecorder) {
	t.Helper()
	if first.Header().Get(HeaderReplayed) != "" {
		t.Errorf("first answer carries %s", HeaderReplayed)
	}
	if again.Header().Get(HeaderReplayed) != "true" {
		t.Errorf("replay lacks %s: true", HeaderReplayed)
	}
	if again.Code != first.Code || again.Body.String() != first.Body.String() {
		t.Errorf("replay = %d %q, want %d %q", again.Code, again.Body, first.Code, first.Body)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if again.Header().Get(h) != first.Header().Get(h) {
			t.Errorf("replayed %s = %q, want %q", h, again.Header().Get(h), first.Header().Get(h))
		}
	}
	if again.Header().Get("X-Not-Kept") != "" {
		t.Error("a header outside MiddlewareOptions.Headers was replayed")
	}
}

func TestMiddlewareReplays201(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: true})
	first := sh.send("u1", orderBody, "k1")
	if first.Code != 201 || first.Header().Get("Location") != "/api/v1/orders/R1" {
		t.Fatalf("first = %d %v", first.Code, first.Header())
	}
	again := sh.send("u1", orderBody, "k1")
	assertReplay(t, first, again)
	if n := sh.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	if sh.bodies[0] != orderBody {
		t.Fatalf("handler read %q, want the request body", sh.bodies[0])
	}
}

func TestMiddlewareReplays409(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: true})
	sh.status = http.StatusConflict
	first := sh.send("u1", orderBody, "k1")
	if first.Code != 409 {
		t.Fatalf("first = %d", first.Code)
	}
	sh.status = http.StatusCreated // stock arrived: still the stored 409
	assertReplay(t, first, sh.send("u1", orderBody, "k1"))
	if n := sh.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestMiddlewareKeyReusedWithOtherBody(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: true})
	sh.send("u1", orderBody, "k1")
	w := sh.send("u1", `{"product_id":7,"quantity":3}`, "k1")
	if w.Code != 422 || !errors.Is(sh.lastErr(), ErrFingerprintMismatch) {
		t.Fatalf("changed body: %d, %v; want 422 ErrFingerprintMismatch", w.Code, sh.lastErr())
	}
	if n := sh.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestMiddlewareSameContentReplays(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: true})
	first := sh.send("u1", orderBody, "k1")
	again := sh.send("u1", "{\n  \"quantity\" : 2,\n  \"product_id\" : 7\n}\n", "k1")
	assertReplay(t, first, again)
	if n := sh.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestMiddlewareConcurrentSameKey(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: true})
	sh.block = make(chan struct{})
	const n = 20
	codes := make(chan int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			codes <- sh.send("u1", orderBody, "k1").Code
		})
	}
	close(start)
	// All but the one running request must come back 409 while it runs.
	conflicts := 0
	timeout := time.After(10 * time.Second)
	for conflicts < n-1 {
		select {
		case c := <-codes:
			if c != http.StatusConflict {
				t.Fatalf("a request answered %d while the key was in flight", c)
			}
			conflicts++
		case <-timeout:
			t.Fatalf("only %d of %d conflicts", conflicts, n-1)
		}
	}
	if got := sh.runs.Load(); got != 1 {
		t.Fatalf("%d handler bodies ran, want 1", got)
	}
	close(sh.block)
	wg.Wait()
	if c := <-codes; c != http.StatusCreated {
		t.Fatalf("the running request answered %d", c)
	}
	if !errors.Is(sh.lastErr(), ErrInUse) {
		t.Fatalf("OnError got %v, want ErrInUse", sh.lastErr())
	}
	if w := sh.send("u1", orderBody, "k1"); w.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("after completion: %d without replay header", w.Code)
	}
	if got := sh.runs.Load(); got != 1 {
		t.Fatalf("%d handler bodies ran, want 1", got)
	}
}

func TestMiddlewareScopesKeysByPrincipal(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: true})
	a := sh.send("alice", orderBody, "shared-key")
	b := sh.send("bob", `{"product_id":9,"quantity":1}`, "shared-key")
	if a.Code != 201 || b.Code != 201 || b.Header().Get(HeaderReplayed) != "" || a.Body.String() == b.Body.String() {
		t.Fatalf("alice %d %q, bob %d %q: want two independent orders", a.Code, a.Body, b.Code, b.Body)
	}
	assertReplay(t, a, sh.send("alice", orderBody, "shared-key"))
}

func TestMiddlewareReleasesUnstoredOutcomes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
	}{
		{"panic", -1},
		{"500", 500},
		{"503 busy", 503},
		{"400", 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: true})
			sh.status = tt.status
			func() {
				defer func() {
					if p := recover(); (p != nil) != (tt.status < 0) {
						t.Errorf("recovered %v", p)
					}
				}()
				if w := sh.send("u1", orderBody, "k1"); w.Code != tt.status {
					t.Errorf("first answer %d, want %d", w.Code, tt.status)
				}
			}()
			sh.status = http.StatusCreated
			w := sh.send("u1", orderBody, "k1")
			if w.Code != 201 || w.Header().Get(HeaderReplayed) != "" || sh.runs.Load() != 2 {
				t.Fatalf("retry: %d (runs %d), want a fresh 201", w.Code, sh.runs.Load())
			}
		})
	}
}

func TestMiddlewareRetentionExpiry(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{Retention: 200 * time.Millisecond}, MiddlewareOptions{Required: true})
	sh.send("u1", orderBody, "k1")
	if w := sh.send("u1", orderBody, "k1"); w.Header().Get(HeaderReplayed) != "true" {
		t.Fatal("no replay within retention")
	}
	time.Sleep(400 * time.Millisecond)
	w := sh.send("u1", `{"quantity":5}`, "k1")
	if w.Code != 201 || w.Header().Get(HeaderReplayed) != "" || sh.runs.Load() != 2 {
		t.Fatalf("after retention: %d (runs %d), want the key free again", w.Code, sh.runs.Load())
	}
}

func TestMiddlewareKeyHeader(t *testing.T) {
	t.Parallel()
	k255, k256 := strings.Repeat("a", 255), strings.Repeat("a", 256)
	tests := []struct {
		name     string
		required bool
		keys     []string
		body     string
		code     int
		err      error
	}{
		{"missing, required", true, nil, orderBody, 400, ErrKeyMissing},
		{"blank", true, []string{"  "}, orderBody, 400, ErrKeyMissing},
		{"malformed", true, []string{"a b"}, orderBody, 400, ErrKeyMalformed},
		{"semicolon", true, []string{"a;b"}, orderBody, 400, ErrKeyMalformed},
		{"256 chars", true, []string{k256}, orderBody, 400, ErrKeyMalformed},
		{"256 quoted", true, []string{`"` + k256 + `"`}, orderBody, 400, ErrKeyMalformed},
		{"two headers", true, []string{"a", "b"}, orderBody, 400, ErrKeyMalformed},
		{"invalid JSON", true, []string{"k"}, `{"product_id":`, 400, ErrInvalidJSON},
		{"255 chars", true, []string{k255}, orderBody, 201, nil},
		{"quoted", true, []string{`"k1"`}, orderBody, 201, nil},
		{"missing, optional", false, nil, orderBody, 201, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: tt.required})
			w := sh.send("u1", tt.body, tt.keys...)
			if w.Code != tt.code || !errors.Is(sh.lastErr(), tt.err) {
				t.Fatalf("%d, %v; want %d, %v", w.Code, sh.lastErr(), tt.code, tt.err)
			}
			wantRuns := int32(0)
			if tt.err == nil {
				wantRuns = 1
			}
			if got := sh.runs.Load(); got != wantRuns {
				t.Fatalf("handler ran %d times, want %d", got, wantRuns)
			}
		})
	}
}

func TestMiddlewareQuotedKeyIsSameKey(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: true})
	first := sh.send("u1", orderBody, `"k1"`)
	assertReplay(t, first, sh.send("u1", orderBody, "k1"))
}

func TestMiddlewareOptionalKeyNotStored(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{}, MiddlewareOptions{})
	sh.send("u1", orderBody)
	if w := sh.send("u1", orderBody); w.Header().Get(HeaderReplayed) != "" || sh.runs.Load() != 2 {
		t.Fatal("a request without a key was replayed")
	}
}

func TestMiddlewareWaitReplays(t *testing.T) {
	t.Parallel()
	sh := newShop(t, StoreOptions{}, MiddlewareOptions{Required: true, Wait: 5 * time.Second})
	sh.block = make(chan struct{})
	firstDone := make(chan *httptest.ResponseRecorder)
	go func() { firstDone <- sh.send("u1", orderBody, "k1") }()
	for i := 0; sh.runs.Load() == 0; i++ {
		if i == 5000 {
			t.Fatal("first request never reached the handler")
		}
		time.Sleep(time.Millisecond)
	}
	time.AfterFunc(200*time.Millisecond, func() { close(sh.block) })
	again := sh.send("u1", orderBody, "k1") // waits instead of 409
	assertReplay(t, <-firstDone, again)
}
