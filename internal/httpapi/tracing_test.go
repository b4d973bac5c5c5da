package httpapi_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/otlprecv"
)

// TestSeckillTraceUnderContention records the spans of seckills that wait
// for the product lock together (the test holds it, as another instance
// would) and checks the tree a person reads in a trace backend: each
// request's span (its parent the traceparent the client sent) with its
// queue wait; the batch that carried it, linked to it, with the lock's
// hold beneath (the wait, the transaction with its statements, the
// release). Spans travel as the shop sends them: OTLP over HTTP, to a
// receiver that decodes the wire format.
func TestSeckillTraceUnderContention(t *testing.T) {
	t.Parallel()
	rec := &otlprecv.Receiver{}
	collector := httptest.NewServer(rec)
	t.Cleanup(collector.Close)
	b := newBackend(t)
	in := b.start(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SERVICE_NAME": "shop-test",
		"SHOP_RATE_ORDERS": "off", "SHOP_LOG_LEVEL": "debug",
	})
	const buyers = 8
	p := in.admin(t).createProduct("traced", 100, buyers-2) // two buyers find it sold out

	locks := lockx.New(b.rdb, lockx.Options{Prefix: b.prefix + "lock:"})
	t.Cleanup(func() { _ = locks.Close() })
	held, err := locks.Acquire(context.Background(), "product:"+id(p.ID), lockx.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type sent struct {
		traceID, parentID string
		r                 reply
	}
	out := make([]sent, buyers)
	var wg sync.WaitGroup
	for i := range out {
		out[i].traceID, out[i].parentID = randomHex(16), randomHex(8)
		wg.Go(func() {
			tp := "00-" + out[i].traceID + "-" + out[i].parentID + "-01"
			out[i].r = in.user(t, int64(100+i)).do("POST", "/api/v1/seckill/"+id(p.ID)+"/orders", nil, hdr{"traceparent", tp})
		})
	}
	// The first batch's leader waits for the lock (subscribed to its
	// release); the others queue behind it meanwhile.
	until(t, 10*time.Second, "a batch waiting for the product lock", func() bool {
		n, err := b.rdb.PubSubChannels(context.Background(), "*product:"+id(p.ID)+"*").Result()
		return err == nil && len(n) > 0
	})
	time.Sleep(300 * time.Millisecond)
	if err := locks.End(context.Background(), held, nil); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	created, soldOut := 0, 0
	for _, s := range out {
		switch s.r.status {
		case http.StatusCreated:
			created++
			timing := s.r.header.Get("Server-Timing")
			for _, phase := range []string{"queue;", "lock;", "tx;"} {
				if !strings.Contains(timing, phase) {
					t.Errorf("created order's Server-Timing %q lacks %s", timing, phase)
				}
			}
		case http.StatusConflict:
			soldOut++
			if got := s.r.problem().TraceID; got != s.traceID {
				t.Errorf("sold-out problem's trace_id = %q, want the request's trace %s: %s", got, s.traceID, s.r.body)
			}
		default:
			t.Errorf("unexpected answer: %v", s.r)
		}
	}
	if created != buyers-2 || soldOut != 2 {
		t.Fatalf("created %d, sold out %d; want %d and 2", created, soldOut, buyers-2)
	}

	// Every request's own trace: its span under the client's parent, and
	// its queue wait beneath.
	reqSpan := map[string]otlprecv.Span{} // trace id -> the request's span
	until(t, 20*time.Second, "every request's span at the receiver", func() bool {
		for _, s := range out {
			for _, sp := range rec.Trace(s.traceID) {
				if sp.Name == "POST /api/v1/seckill/:product_id/orders" {
					reqSpan[s.traceID] = sp
				}
			}
		}
		return len(reqSpan) == buyers
	})
	for _, s := range out {
		rs := reqSpan[s.traceID]
		if rs.ParentID != s.parentID || rs.Service != "shop-test" || rs.Attrs["http.route"] != "/api/v1/seckill/:product_id/orders" {
			t.Errorf("request span %+v: want parent %s (the traceparent's), service shop-test, http.route", rs, s.parentID)
		}
		if len(children(rec.Trace(s.traceID), rs, "order.queue")) != 1 {
			t.Errorf("trace %s: no order.queue span under the request", s.traceID)
		}
		if !strings.Contains(in.log.String(), "trace_id="+s.traceID) {
			t.Errorf("no log line of trace %s", s.traceID)
		}
	}

	// The batches: each linked to the requests it carried, one of them
	// carrying more than one (they queued behind the held lock).
	var shared bool
	for _, s := range out {
		batch, ok := linking(rec.Spans(), reqSpan[s.traceID])
		if !ok {
			t.Errorf("no order.batch span links to the request of trace %s", s.traceID)
			continue
		}
		size, _ := strconv.Atoi(batch.Attrs["shop.batch.size"])
		shared = shared || size > 1
		checkBatchTree(t, rec.Trace(batch.TraceID), batch)
	}
	if !shared {
		t.Error("no batch carried more than one request: the requests did not contend")
	}
	// Exemplars: the request and lock-wait histograms, served as
	// OpenMetrics, carry trace ids of these requests and batches.
	req, _ := http.NewRequest("GET", in.base+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ours := map[string]bool{}
	for _, s := range out {
		ours[s.traceID] = true
	}
	for _, family := range []string{"shop_http_request_duration_seconds_bucket", "shop_lock_wait_duration_seconds_bucket"} {
		found := false
		for _, line := range strings.Split(string(metrics), "\n") {
			if _, ex, ok := strings.Cut(line, ` # {trace_id="`); ok && strings.HasPrefix(line, family) {
				found = found || ours[ex[:32]]
			}
		}
		if !found {
			t.Errorf("no %s exemplar names one of the test's traces (Content-Type %s)", family, resp.Header.Get("Content-Type"))
		}
	}

	// The trees, for a reader (go test -v; docs chapter 7 shows one).
	for _, s := range out {
		t.Logf("trace %s:\n%s", s.traceID, tree(rec.Trace(s.traceID), s.parentID, 0))
	}
}

// tree renders the spans of a trace under parent as an indented outline.
func tree(trace []otlprecv.Span, parent string, depth int) string {
	var b strings.Builder
	for _, sp := range trace {
		if sp.ParentID != parent {
			continue
		}
		fmt.Fprintf(&b, "%s%s %.2f ms", strings.Repeat("  ", depth), sp.Name, float64(sp.End.Sub(sp.Start).Microseconds())/1000)
		for _, k := range []string{"shop.batch.size", "shop.lock.fence", "db.query.text"} {
			if v := sp.Attrs[k]; v != "" {
				fmt.Fprintf(&b, " %s=%q", k, v)
			}
		}
		if len(sp.Links) > 0 {
			fmt.Fprintf(&b, " links=%d", len(sp.Links))
		}
		b.WriteString("\n")
		b.WriteString(tree(trace, sp.SpanID, depth+1))
	}
	return b.String()
}

// checkBatchTree checks what lies under a batch's span: the lock's hold,
// its wait, the transaction (fence and batch size as attributes, its
// statements beneath) and the release.
func checkBatchTree(t *testing.T, trace []otlprecv.Span, batch otlprecv.Span) {
	t.Helper()
	holds := children(trace, batch, "inventory.lock")
	if len(holds) != 1 {
		t.Errorf("batch %s: %d inventory.lock spans beneath, want 1", batch.SpanID, len(holds))
		return
	}
	hold := holds[0]
	// A batch under a hold kept from the batch before (shop.lock.kept)
	// waited nothing, and one that keeps it for the next releases nothing.
	if len(children(trace, hold, "inventory.lock.wait")) != 1 || len(children(trace, hold, "inventory.lock.release")) > 1 {
		t.Errorf("hold %s: want one inventory.lock.wait and at most one inventory.lock.release beneath: %v", hold.SpanID, names(trace, hold))
	}
	txs := children(trace, hold, "order.batch.tx")
	if len(txs) != 1 {
		t.Errorf("hold %s: %d order.batch.tx beneath, want 1: %v", hold.SpanID, len(txs), names(trace, hold))
		return
	}
	tx := txs[0]
	if tx.Attrs["shop.lock.fence"] == "" || tx.Attrs["shop.lock.fence"] != hold.Attrs["shop.lock.fence"] || tx.Attrs["shop.batch.size"] != batch.Attrs["shop.batch.size"] {
		t.Errorf("tx attributes %v, hold's %v, batch's %v: want the hold's fence and the batch's size", tx.Attrs, hold.Attrs, batch.Attrs)
	}
	var statements []string
	for _, sp := range trace {
		if sp.ParentID == tx.SpanID && strings.HasPrefix(sp.Name, "sql.") {
			statements = append(statements, sp.Name+" "+sp.Attrs["db.query.text"])
		}
	}
	all := strings.Join(statements, "\n")
	wants := []string{"sql.conn.begin_tx", "UPDATE", "INSERT INTO orders", "sql.tx.commit"}
	if strings.Contains(all, "sql.packet") { // the batch in one round trip
		wants = []string{"START TRANSACTION", "UPDATE products", "INSERT INTO orders", "COMMIT"}
	}
	for _, want := range wants {
		if !strings.Contains(all, want) {
			t.Errorf("the batch's statements lack %q:\n%s", want, all)
		}
	}
}

// children are the spans of trace named name whose parent is parent.
func children(trace []otlprecv.Span, parent otlprecv.Span, name string) []otlprecv.Span {
	var out []otlprecv.Span
	for _, sp := range trace {
		if sp.ParentID == parent.SpanID && sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

func names(trace []otlprecv.Span, parent otlprecv.Span) []string {
	var out []string
	for _, sp := range trace {
		if sp.ParentID == parent.SpanID {
			out = append(out, sp.Name)
		}
	}
	return out
}

// linking is the order.batch span that links to span.
func linking(spans []otlprecv.Span, span otlprecv.Span) (otlprecv.Span, bool) {
	for _, sp := range spans {
		if sp.Name != "order.batch" {
			continue
		}
		for _, l := range sp.Links {
			if l.TraceID == span.TraceID && l.SpanID == span.SpanID {
				return sp, true
			}
		}
	}
	return otlprecv.Span{}, false
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// until polls cond every 50 ms until it holds, failing after limit.
func until(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within %s", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
