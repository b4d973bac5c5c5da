package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/wire"
)

// UserAgent names the load generator's requests, so that a shop logs them
// at debug: a lab race of 5,000 buyers would otherwise bury its log.
const UserAgent = "shop-loadgen/1"

// Client speaks the shop's HTTP API (docs/api.md) to one or more instances.
type Client struct {
	BaseURLs   []string
	AdminToken string
	HTTP       *http.Client
	// Timeout bounds one request when the call gives none (default 10s).
	Timeout time.Duration
}

// NewClient returns a client with a connection pool sized for concurrency
// parallel requests.
func NewClient(baseURLs []string, adminToken string, concurrency int) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = max(100, concurrency*2)
	tr.MaxIdleConnsPerHost = max(16, concurrency)
	tr.IdleConnTimeout = 30 * time.Second
	urls := make([]string, len(baseURLs))
	for i, u := range baseURLs {
		urls[i] = strings.TrimRight(u, "/")
	}
	return &Client{BaseURLs: urls, AdminToken: adminToken, HTTP: &http.Client{Transport: tr}, Timeout: 10 * time.Second}
}

// Call is one request.
type Call struct {
	Target  int // index into BaseURLs (taken modulo their number)
	Method  string
	Path    string
	Token   string // bearer token; "" sends none
	Key     string // Idempotency-Key; "" sends none
	Body    any    // marshalled as JSON; nil sends an empty body
	Timeout time.Duration
	From    string // X-Forwarded-For: the simulated client address; "" sends none
}

// Answer is what came back.
type Answer struct {
	Status   int
	Code     string // problem+json code
	Replayed bool
	// DoubtNo is the order number a 503 outcome_unknown named (regular
	// orders): the order that may exist.
	DoubtNo string
	Header  http.Header
	Body    []byte
	Err     error // transport error or client timeout (Status is 0)
	Start   time.Time
	End     time.Time
}

// Do sends one request and reads the whole answer. It never returns a Go
// error: a transport failure is an Answer with Status 0 and Err set, so
// load loops record it like any other outcome.
func (c *Client) Do(ctx context.Context, call Call) Answer {
	timeout := call.Timeout
	if timeout <= 0 {
		timeout = c.Timeout
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if call.Body != nil {
		b, err := json.Marshal(call.Body)
		if err != nil {
			return Answer{Err: err, Start: time.Now(), End: time.Now()}
		}
		body = bytes.NewReader(b)
	}
	base := c.BaseURLs[((call.Target%len(c.BaseURLs))+len(c.BaseURLs))%len(c.BaseURLs)]
	a := Answer{Start: time.Now()}
	req, err := http.NewRequestWithContext(ctx, call.Method, base+call.Path, body)
	if err != nil {
		a.Err, a.End = err, time.Now()
		return a
	}
	req.Header.Set("User-Agent", UserAgent)
	if call.From != "" {
		req.Header.Set("X-Forwarded-For", call.From)
	}
	if call.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if call.Token != "" {
		req.Header.Set("Authorization", "Bearer "+call.Token)
	}
	if call.Key != "" {
		req.Header.Set("Idempotency-Key", call.Key)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		a.Err, a.End = err, time.Now()
		return a
	}
	defer resp.Body.Close()
	a.Body, err = io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	a.End = time.Now()
	if err != nil {
		// The status line arrived but not the whole body: the outcome is as
		// unknown to the client as with no answer at all.
		a.Err = err
		return a
	}
	a.Status = resp.StatusCode
	a.Header = resp.Header
	a.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p wire.Problem
		_ = json.Unmarshal(a.Body, &p)
		a.Code, a.DoubtNo = p.Code, p.OrderNo
	}
	return a
}

// Error turns an answer that is not the expected status into an error that
// says what came back.
func (a Answer) Error(want int) error {
	if a.Status == want {
		return nil
	}
	if a.Err != nil {
		return a.Err
	}
	b := a.Body
	if len(b) > 300 {
		b = b[:300]
	}
	return fmt.Errorf("HTTP %d (want %d): %s", a.Status, want, bytes.TrimSpace(b))
}

// simulatedAddr is the client address a simulated buyer logs in from. The
// demo login is rate limited per client address; a shop that trusts the
// load generator as a proxy (SHOP_TRUSTED_PROXIES, as the harness's own
// shops do) sees thousands of buyers from thousands of addresses, as in a
// real sale; any other shop ignores the header and limits the generator.
func simulatedAddr(userID int64) string {
	u := uint64(userID)
	return fmt.Sprintf("10.%d.%d.%d", (u>>16)&255, (u>>8)&255, u&255)
}

// Token logs userID in (demo login) on target.
func (c *Client) Token(ctx context.Context, target int, userID int64) (string, error) {
	var out wire.Login
	a := c.Do(ctx, Call{Target: target, Method: http.MethodPost, Path: "/api/v1/auth/token", Body: map[string]int64{"user_id": userID},
		From: simulatedAddr(userID)})
	if err := a.Error(http.StatusOK); err != nil {
		return "", fmt.Errorf("token for user %d: %w", userID, err)
	}
	if err := json.Unmarshal(a.Body, &out); err != nil || out.Token == "" {
		return "", fmt.Errorf("token for user %d: unreadable answer %q", userID, a.Body)
	}
	return out.Token, nil
}

// CreateProduct creates a product (admin), retried safely under key.
func (c *Client) CreateProduct(ctx context.Context, name string, priceCents, stock int64, key string) (wire.Product, error) {
	var p wire.Product
	var a Answer
	for attempt := 0; attempt < 5; attempt++ {
		a = c.Do(ctx, Call{Target: attempt, Method: http.MethodPost, Path: "/api/v1/admin/products", Token: c.AdminToken, Key: key,
			Body: map[string]any{"name": name, "price_cents": priceCents, "stock": stock}})
		if a.Status == http.StatusCreated || a.Status == http.StatusOK {
			err := json.Unmarshal(a.Body, &p)
			return p, err
		}
		if !retryable(a) {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return p, fmt.Errorf("create product %q: %w", name, a.Error(http.StatusCreated))
}

// Restock adds quantity units to a product (admin) under key, retried
// safely with it.
func (c *Client) Restock(ctx context.Context, productID, quantity int64, key string) error {
	var a Answer
	for attempt := 0; attempt < 5; attempt++ {
		a = c.Do(ctx, Call{Target: attempt, Method: http.MethodPost, Path: "/api/v1/admin/products/" + strconv.FormatInt(productID, 10) + "/restock",
			Token: c.AdminToken, Key: key, Body: map[string]int64{"quantity": quantity}})
		if a.Status == http.StatusOK || !retryable(a) {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	if err := a.Error(http.StatusOK); err != nil {
		return fmt.Errorf("restock product %d: %w", productID, err)
	}
	return nil
}

// Order reads the order no as its owner (token).
func (c *Client) Order(ctx context.Context, target int, token, no string) (wire.Order, bool, error) {
	var o wire.Order
	a := c.Do(ctx, Call{Target: target, Method: http.MethodGet, Path: "/api/v1/orders/" + no, Token: token})
	if a.Status == http.StatusNotFound {
		return o, false, nil
	}
	if err := a.Error(http.StatusOK); err != nil {
		return o, false, err
	}
	return o, true, json.Unmarshal(a.Body, &o)
}

// Wallet reads the wallet of the token's user.
func (c *Client) Wallet(ctx context.Context, target int, token string) (wire.Wallet, error) {
	var w wire.Wallet
	a := c.Do(ctx, Call{Target: target, Method: http.MethodGet, Path: "/api/v1/wallet", Token: token})
	if err := a.Error(http.StatusOK); err != nil {
		return w, err
	}
	return w, json.Unmarshal(a.Body, &w)
}

// Audit runs the admin audit route, for one product or (0) everything.
func (c *Client) Audit(ctx context.Context, productID int64) (audit.Report, error) {
	var r audit.Report
	path := "/api/v1/admin/audit"
	if productID != 0 {
		path += "?product_id=" + strconv.FormatInt(productID, 10)
	}
	a := c.Do(ctx, Call{Method: http.MethodGet, Path: path, Token: c.AdminToken, Timeout: 60 * time.Second})
	if err := a.Error(http.StatusOK); err != nil {
		return r, fmt.Errorf("audit: %w", err)
	}
	return r, json.Unmarshal(a.Body, &r)
}

// Metrics scrapes target's /metrics and returns every sample whose name
// starts with prefix, summed over labels.
func (c *Client) Metrics(ctx context.Context, target int, prefix string) (map[string]float64, error) {
	b, err := c.scrape(ctx, target)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(b, prefix), nil
}

// MetricsBy scrapes target's /metrics and returns every sample whose name
// starts with prefix by the value of label ("" for a sample without it),
// summed over the other labels.
func (c *Client) MetricsBy(ctx context.Context, target int, prefix, label string) (map[string]map[string]float64, error) {
	b, err := c.scrape(ctx, target)
	if err != nil {
		return nil, err
	}
	return ParseMetricsBy(b, prefix, label), nil
}

func (c *Client) scrape(ctx context.Context, target int) ([]byte, error) {
	a := c.Do(ctx, Call{Target: target, Method: http.MethodGet, Path: "/metrics", Timeout: 3 * time.Second})
	if err := a.Error(http.StatusOK); err != nil {
		return nil, err
	}
	return a.Body, nil
}

// ParseMetrics reads Prometheus text format, summing samples of one name
// over their labels.
func ParseMetrics(text []byte, prefix string) map[string]float64 {
	out := map[string]float64{}
	eachSample(text, prefix, func(name, _ string, v float64) { out[name] += v })
	return out
}

// ParseMetricsBy reads Prometheus text format, summing samples of one name
// and one value of label over their other labels.
func ParseMetricsBy(text []byte, prefix, label string) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	eachSample(text, prefix, func(name, labels string, v float64) {
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		out[name][labelValue(labels, label)] += v
	})
	return out
}

// eachSample calls f with each sample of text whose name starts with
// prefix: its name, its label set as written ({a="x",b="y"}; "" without
// labels) and its value.
func eachSample(text []byte, prefix string, f func(name, labels string, v float64)) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, prefix) {
			continue
		}
		name, labels, rest := line, "", ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if j := strings.LastIndexByte(rest, '}'); j >= 0 {
			labels, rest = rest[:j+1], rest[j+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			f(name, labels, v)
		}
	}
}

// labelValue is label's value in a label set as written ({a="x",b="y"}),
// escapes undone; "" when the set has no such label.
func labelValue(labels, label string) string {
	rest := strings.TrimPrefix(labels, "{")
	for rest != "" {
		name, after, ok := strings.Cut(rest, "=")
		if !ok || !strings.HasPrefix(after, `"`) {
			return ""
		}
		var v strings.Builder
		i := 1
		for ; i < len(after) && after[i] != '"'; i++ {
			if after[i] == '\\' && i+1 < len(after) {
				i++
				if after[i] == 'n' {
					v.WriteByte('\n')
					continue
				}
			}
			v.WriteByte(after[i])
		}
		if strings.TrimSpace(name) == label {
			return v.String()
		}
		rest = strings.TrimLeft(after[min(i+1, len(after)):], ", ")
	}
	return ""
}

// Ready waits until every base URL answers /readyz 200, or ctx ends.
func (c *Client) Ready(ctx context.Context) error {
	for i := range c.BaseURLs {
		for {
			a := c.Do(ctx, Call{Target: i, Method: http.MethodGet, Path: "/readyz", Timeout: 2 * time.Second})
			if a.Status == http.StatusOK {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s not ready: %w (last answer: %v)", c.BaseURLs[i], ctx.Err(), a.Error(http.StatusOK))
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
	return nil
}

// retryable: the answer says "try again" (503 busy or not ready, 409 key
// in use) or says nothing (no answer, 5xx).
func retryable(a Answer) bool {
	return a.Status == 0 || a.Status >= 500 || a.Code == "idempotency_key_in_use"
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// errNoTargets is returned by every entry point given no base URL.
var errNoTargets = errors.New("loadgen: no base URLs")
