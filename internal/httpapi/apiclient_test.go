package httpapi_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/app"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/wire"
)

// The API tests start the real server through app.Run, as the binary does,
// against a fresh MariaDB database and a private Redis key prefix, and talk
// HTTP to it. Every answer is also checked against openapi.json: the status
// must be documented for the operation and 2xx bodies must have the
// schema's required fields and types.

const (
	adminToken = "test-admin-token-0123456789abcdef"
	authSecret = "test-auth-secret-0123456789abcdef"
)

// backend is one test's database and Redis prefix, shared by the instances
// the test starts (as instances behind one load balancer share them).
type backend struct {
	dsn, redisURL, prefix string
	db                    *sql.DB
	rdb                   *redis.Client
}

func newBackend(t *testing.T) *backend {
	t.Helper()
	return newBackendOn(t, testenv.MySQL(t))
}

// newBackendOn is newBackend on the database dsn names.
func newBackendOn(t *testing.T, dsn string) *backend {
	t.Helper()
	b := &backend{dsn: dsn}
	b.redisURL, b.prefix = testenv.Redis(t)
	db, err := sql.Open("mysql", b.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b.db = db
	opt, err := redis.ParseURL(b.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	b.rdb = redis.NewClient(opt)
	t.Cleanup(func() { b.rdb.Close() })
	return b
}

// instance is one running shop.
type instance struct {
	base string
	log  testenv.Log
}

// start runs `shop serve` on a free port with the backend's database and
// Redis prefix, the test secrets and env on top; it is stopped (and waited
// for) at cleanup.
func (b *backend) start(t *testing.T, env map[string]string) *instance {
	t.Helper()
	port := testenv.FreePort(t)
	vars := map[string]string{
		"SHOP_ADDR":           "127.0.0.1:" + strconv.Itoa(port),
		"SHOP_MYSQL_DSN":      b.dsn,
		"SHOP_REDIS_URL":      b.redisURL,
		"SHOP_REDIS_PREFIX":   b.prefix,
		"SHOP_ADMIN_TOKEN":    adminToken,
		"SHOP_AUTH_SECRET":    authSecret,
		"SHOP_SWEEP_INTERVAL": "0",
		"SHOP_SHUTDOWN_WAIT":  "5s",
		"SHOP_LOG_LEVEL":      "warn",
	}
	for k, v := range env {
		vars[k] = v
	}
	shop := testenv.StartShop(t, app.Run, testenv.ShopOptions{Getenv: func(k string) string { return vars[k] }, StopWait: 30 * time.Second})
	in := &instance{base: "http://" + vars["SHOP_ADDR"], log: shop.Log}
	shop.Answers(t, 90*time.Second, httpClient, in.base+"/healthz")
	return in
}

// count runs a COUNT-like query.
func (b *backend) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	var n sql.NullInt64
	if err := b.db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n.Int64
}

func (b *backend) stock(t *testing.T, productID int64) int64 {
	return b.count(t, "SELECT stock FROM products WHERE id = ?", productID)
}

// forgetRedis deletes every key under the test's prefix (SCAN + DEL, never
// FLUSHALL: Redis is shared): what a Redis restart without persistence does.
func (b *backend) forgetRedis(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	iter := b.rdb.Scan(ctx, 0, b.prefix+"*", 500).Iterator()
	n := 0
	for iter.Next(ctx) && n < 100000 {
		b.rdb.Del(ctx, iter.Val())
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
}

// verify runs `shop verify` against the backend's database.
func (b *backend) verify(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := app.Run(ctx, append([]string{"verify", "--mysql-dsn", b.dsn}, args...),
		func(string) string { return "" }, &out, &errb)
	return out.String(), err
}

var httpClient = &http.Client{
	Timeout:   60 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second},
}

// signToken makes a user token as the server does, valid until exp, signed
// with secret.
func signToken(t *testing.T, userID int64, exp time.Time, secret string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: strconv.FormatInt(userID, 10), Issuer: "shop",
		IssuedAt: jwt.NewNumericDate(time.Now().Add(-time.Minute)), ExpiresAt: jwt.NewNumericDate(exp),
	}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func userToken(t *testing.T, userID int64) string {
	return signToken(t, userID, time.Now().Add(time.Hour), authSecret)
}

// client talks to one instance as one principal.
type client struct {
	t     *testing.T
	base  string
	token string
}

func (in *instance) admin(t *testing.T) client { return client{t, in.base, adminToken} }
func (in *instance) user(t *testing.T, id int64) client {
	return client{t, in.base, userToken(t, id)}
}
func (in *instance) anon(t *testing.T) client { return client{t, in.base, ""} }

// reply is one answer.
type reply struct {
	method, path string
	status       int
	header       http.Header
	body         []byte
}

// hdr is a request header; an empty value removes the header.
type hdr struct{ k, v string }

// raw marks a body sent exactly as given.
type raw string

// do sends one request. body: nil (none), raw or []byte (as is), io.Reader
// (streamed, chunked) or anything else (JSON-encoded).
func (c client) do(method, path string, body any, headers ...hdr) reply {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case raw:
		rd = strings.NewReader(string(b))
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = struct{ io.Reader }{b} // hide the length: chunked
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for _, h := range headers {
		if h.v == "" {
			req.Header.Del(h.k)
		} else {
			req.Header.Set(h.k, h.v)
		}
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		c.t.Errorf("%s %s: %v", method, path, err)
		return reply{method: method, path: path}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Errorf("%s %s: read body: %v", method, path, err)
	}
	r := reply{method: method, path: path, status: resp.StatusCode, header: resp.Header, body: b}
	checkContract(c.t, r)
	return r
}

func (r reply) String() string {
	return fmt.Sprintf("%s %s -> %d %s", r.method, r.path, r.status, r.body)
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func (r reply) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("%v: body is not the JSON expected: %v", r, err)
	}
}

func (r reply) problem() wire.Problem {
	var p wire.Problem
	_ = json.Unmarshal(r.body, &p)
	return p
}

// want checks status and, for errors, the problem code; it reports whether
// they matched.
func (r reply) want(t *testing.T, status int, code string) bool {
	t.Helper()
	if r.status != status {
		t.Errorf("%v; want %d %s", r, status, code)
		return false
	}
	if code != "" && r.problem().Code != code {
		t.Errorf("%v; want code %s", r, code)
		return false
	}
	return true
}

// orderKey compares orders by value (the time fields are pointers).
func orderKey(o wire.Order) string {
	b, _ := json.Marshal(o)
	return string(b)
}

func (r reply) order(t *testing.T) wire.Order {
	t.Helper()
	var o wire.Order
	r.json(t, &o)
	return o
}

func (r reply) product(t *testing.T) wire.Product {
	t.Helper()
	var p wire.Product
	r.json(t, &p)
	return p
}

// createProduct makes a product through the admin API.
func (c client) createProduct(name string, price, stock int64) wire.Product {
	c.t.Helper()
	r := c.do("POST", "/api/v1/admin/products", map[string]any{"name": name, "price_cents": price, "stock": stock})
	if !r.want(c.t, http.StatusCreated, "") {
		c.t.FailNow()
	}
	return r.product(c.t)
}

func (c client) regular(productID, quantity int64, key string) reply {
	c.t.Helper()
	return c.do("POST", "/api/v1/orders", map[string]int64{"product_id": productID, "quantity": quantity}, hdr{"Idempotency-Key", key})
}

func (c client) seckill(productID int64) reply {
	c.t.Helper()
	return c.do("POST", "/api/v1/seckill/"+strconv.FormatInt(productID, 10)+"/orders", nil)
}

// --- the contract check against openapi.json ---

type docOp struct {
	method    string
	re        *regexp.Regexp
	responses map[string]any
}

var (
	docOnce sync.Once
	docRoot map[string]any
	docOps  []docOp
	docErr  error
)

func loadContract() {
	b, err := os.ReadFile("openapi.json")
	if err != nil {
		docErr = err
		return
	}
	if docErr = json.Unmarshal(b, &docRoot); docErr != nil {
		return
	}
	paths, _ := docRoot["paths"].(map[string]any)
	param := regexp.MustCompile(`\\\{[^/]+\\\}`)
	for p, item := range paths {
		re := regexp.MustCompile("^" + param.ReplaceAllString(regexp.QuoteMeta(p), "[^/]+") + "$")
		for m, op := range item.(map[string]any) {
			resp, _ := op.(map[string]any)["responses"].(map[string]any)
			docOps = append(docOps, docOp{strings.ToUpper(m), re, resp})
		}
	}
}

func deref(v any) any {
	for range 10 {
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return v
		}
		var cur any = docRoot
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		v = cur
	}
	return v
}

// checkContract holds an answer to openapi.json.
func checkContract(t *testing.T, r reply) {
	t.Helper()
	docOnce.Do(loadContract)
	if docErr != nil {
		t.Errorf("openapi.json: %v", docErr)
		return
	}
	path, _, _ := strings.Cut(r.path, "?")
	if r.status >= 400 {
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%v: Content-Type %q, want application/problem+json", r, ct)
		}
		p := r.problem()
		if p.Status != r.status || p.Code == "" || p.Type != "urn:shop:problem:"+p.Code || p.Title == "" {
			t.Errorf("%v: not a problem of this status", r)
		}
	}
	if r.status == http.StatusServiceUnavailable && r.problem().Code == "busy" && r.header.Get("Retry-After") != "1" {
		t.Errorf("%v: 503 busy without Retry-After: 1", r)
	}
	var op *docOp
	pathKnown := false
	for i := range docOps {
		if docOps[i].re.MatchString(path) {
			pathKnown = true
			if docOps[i].method == r.method {
				op = &docOps[i]
			}
		}
	}
	switch {
	case op == nil && pathKnown:
		if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") == "" {
			t.Errorf("%v: the document has no such operation, want 405 with Allow", r)
		}
		return
	case op == nil:
		if r.status != http.StatusNotFound {
			t.Errorf("%v: the document has no such path, want 404", r)
		}
		return
	}
	resp, ok := op.responses[strconv.Itoa(r.status)]
	if !ok {
		t.Errorf("%v: status %d is not documented for %s %s", r, r.status, r.method, path)
		return
	}
	content, _ := deref(resp).(map[string]any)["content"].(map[string]any)
	if r.status >= 300 {
		if pj, ok := content["application/problem+json"].(map[string]any); ok {
			if ex, _ := pj["examples"].(map[string]any); ex != nil {
				if _, listed := ex[r.problem().Code]; !listed {
					t.Errorf("%v: code %s is not documented for this status", r, r.problem().Code)
				}
			}
		}
		return
	}
	mt, ok := content["application/json"].(map[string]any)
	if !ok {
		return // text/plain metrics
	}
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Errorf("%v: not JSON: %v", r, err)
		return
	}
	if err := conforms(mt["schema"], v, "body"); err != nil {
		t.Errorf("%v: does not match openapi.json: %v", r, err)
	}
	if hs, _ := deref(resp).(map[string]any)["headers"].(map[string]any); hs != nil {
		for h := range r.header {
			if (h == "Location" || h == "Idempotent-Replayed") && hs[h] == nil {
				t.Errorf("%v: header %s is not documented for this answer", r, h)
			}
		}
	}
}

// conforms checks the parts of a schema this API uses: types, required
// properties, enums, nullability and integer bounds.
func conforms(schema, v any, at string) error {
	s, _ := deref(schema).(map[string]any)
	if s == nil {
		return nil
	}
	for _, sub := range asSlice(s["allOf"]) {
		if v == nil && s["nullable"] == true {
			return nil
		}
		if err := conforms(sub, v, at); err != nil {
			return err
		}
	}
	if v == nil {
		if s["nullable"] == true || s["type"] == nil {
			return nil
		}
		return fmt.Errorf("%s is null", at)
	}
	if enum := asSlice(s["enum"]); enum != nil && !slices.Contains(enum, v) {
		return fmt.Errorf("%s = %v, not one of %v", at, v, enum)
	}
	switch s["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is not an object", at)
		}
		for _, req := range asSlice(s["required"]) {
			if _, ok := m[req.(string)]; !ok {
				return fmt.Errorf("%s.%s is missing", at, req)
			}
		}
		props, _ := s["properties"].(map[string]any)
		for k, pv := range m {
			if ps, ok := props[k]; ok {
				if err := conforms(ps, pv, at+"."+k); err != nil {
					return err
				}
			} else if props != nil && s["additionalProperties"] == nil {
				return fmt.Errorf("%s.%s is not in the schema", at, k)
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s is not an array", at)
		}
		for i, x := range a {
			if err := conforms(s["items"], x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) {
			return fmt.Errorf("%s = %v is not an integer", at, v)
		}
		if lo, ok := s["minimum"].(float64); ok && f < lo {
			return fmt.Errorf("%s = %v below %v", at, f, lo)
		}
		if hi, ok := s["maximum"].(float64); ok && f > hi {
			return fmt.Errorf("%s = %v above %v", at, f, hi)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s = %v is not a string", at, v)
		}
		if s["format"] == "date-time" {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil || !strings.HasSuffix(str, "Z") {
				return fmt.Errorf("%s = %q is not an RFC 3339 UTC time", at, str)
			}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s = %v is not a boolean", at, v)
		}
	}
	return nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}
