package bench

// The bench's load generator: closed-loop keep-alive clients, user tokens
// minted in process, answers counted without decoding them.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"hash/fnv"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-lab/shop/loadtest/internal/benchreport"
	"github.com/seckill-lab/shop/loadtest/internal/render"
)

// benchUsers hands out distinct buyer ids and their bearer headers, minted
// here with the shops' SHOP_AUTH_SECRET as the demo login signs them (HS256,
// issuer "shop", subject the user id): the login route is rate limited per
// address, and a login per order would double the load.
type benchUsers struct {
	Next   atomic.Int64
	Secret []byte
}

// take reserves n consecutive user ids and returns the first.
func (u *benchUsers) Take(n int64) int64 { return u.Next.Add(n) - n + 1 }

// minter signs tokens for one goroutine: one HMAC state and buffer reused,
// a few hundred nanoseconds and one allocation per token.
type Minter struct {
	Mac      hash.Hash
	buf, sum []byte
	Iat, Exp int64
}

func (u *benchUsers) Minter() *Minter {
	now := time.Now()
	return &Minter{Mac: hmac.New(sha256.New, u.Secret), Iat: now.Unix(), Exp: now.Add(time.Hour).Unix()}
}

var jwtHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// bearer is the Authorization header value of user id.
func (m *Minter) Bearer(id int64) string {
	var claims [96]byte
	c := append(claims[:0], `{"iss":"shop","sub":"`...)
	c = strconv.AppendInt(c, id, 10)
	c = append(c, `","exp":`...)
	c = strconv.AppendInt(c, m.Exp, 10)
	c = append(c, `,"iat":`...)
	c = strconv.AppendInt(c, m.Iat, 10)
	c = append(c, '}')
	enc := base64.RawURLEncoding
	b := append(m.buf[:0], "Bearer "...)
	b = append(b, jwtHeader...)
	b = append(b, '.')
	b = enc.AppendEncode(b, c)
	m.Mac.Reset()
	m.Mac.Write(b[len("Bearer "):])
	m.sum = m.Mac.Sum(m.sum[:0])
	b = append(b, '.')
	b = enc.AppendEncode(b, m.sum)
	m.buf = b
	return string(b)
}

// headers mints n bearer headers for fresh users, on both cores.
func (u *benchUsers) Headers(n int) []string {
	first := u.Take(int64(n))
	out := make([]string, n)
	var wg sync.WaitGroup
	const parts = 2
	for p := range parts {
		wg.Go(func() {
			m := u.Minter()
			for i := p; i < n; i += parts {
				out[i] = m.Bearer(first + int64(i))
			}
		})
	}
	wg.Wait()
	return out
}

// benchLoad is a closed loop of clients sending one kind of request.
type benchLoad struct {
	method, path string
	paths        []string      // several paths (products): client i sends to paths[i mod len]; nil: path
	Want         int           // the status that counts
	WantCode     string        // and its problem code, if any
	Users        *benchUsers   // nil: no token; else every request a new user
	Timeout      time.Duration // for an answer's head; 0: 30 s
	// affine sends every client to the instance the path hashes to, as
	// deploy/nginx.conf does for a product's seckill orders (see
	// rendezvous); false spreads the clients round robin.
	Affine bool
	// rampIn spreads the clients' first requests (and so their connects)
	// over this time, client i at i/clients of it; 0: all at once.
	RampIn time.Duration
}

// rendezvous ranks urls for key by highest random weight: the first is
// the key's instance, and when it goes away only its keys move, each to
// its own next one. It is the harness's twin of nginx's consistent hash.
func rendezvous(urls []*url.URL, key string) []*url.URL {
	score := func(u *url.URL) uint64 {
		h := fnv.New64a()
		h.Write([]byte(u.Host))
		h.Write([]byte{0})
		h.Write([]byte(key))
		return h.Sum64()
	}
	out := slices.Clone(urls)
	slices.SortStableFunc(out, func(a, b *url.URL) int { return cmp.Compare(score(b), score(a)) })
	return out
}

// ranks gives client i its instances in the order it tries them: the
// path's ranking when affine, else round robin starting at i.
func (l benchLoad) Ranks(targets []*url.URL, path string, i int) []*url.URL {
	if l.Affine {
		return rendezvous(targets, path)
	}
	k := i % len(targets)
	return append(slices.Clone(targets[k:]), targets[:k]...)
}

// benchPool bounds the tokens minted before a phase; past them each client
// mints its own as it goes.
const benchPool = 100_000

// run drives clients (client i on urls[i % len], or all on the path's
// instance when l.affine; a client whose instance fails moves to the next
// in its ranking) for warmup + d and reports
// the answers of the requests that started in the window.
func (l benchLoad) Run(ctx context.Context, urls []string, Clients int, Warmup, d time.Duration) (benchreport.Rate, error) {
	out := benchreport.Rate{Clients: Clients, Answers: map[string]int{}}
	paths := l.paths
	if len(paths) == 0 {
		paths = []string{l.path}
	}
	targets := make([][]*url.URL, len(paths)) // per path, each instance's URL
	for p, path := range paths {
		for _, s := range urls {
			u, err := url.Parse(s + path)
			if err != nil {
				return out, err
			}
			targets[p] = append(targets[p], u)
		}
	}
	var pool []string
	if l.Users != nil {
		pool = l.Users.Headers(min(benchPool, max(Clients*4, int(5_000*(Warmup+d).Seconds()))))
	}
	var next atomic.Int64
	bearer := func(m *Minter) string {
		if i := next.Add(1) - 1; i < int64(len(pool)) {
			return pool[i]
		}
		return m.Bearer(l.Users.Take(1))
	}
	timeout := cmp.Or(l.Timeout, 30*time.Second)
	// Every client is started and parked before the clock starts, so that
	// thousands of them begin together rather than as the scheduler gets
	// to them behind the ones already looping.
	results := make([]benchClientResult, Clients)
	var t0, t1 time.Time
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for i := range Clients {
		wg.Go(func() {
			p := i % len(paths)
			ranked := l.Ranks(targets[p], paths[p], i)
			// Each client its own connection, as a k6 VU or a browser
			// has: with one pool for all, a request waits for whichever
			// connection frees first, behind other clients' requests.
			w := newWireClient(timeout)
			defer w.Close()
			<-begin
			if l.RampIn > 0 {
				time.Sleep(l.RampIn * time.Duration(i) / time.Duration(Clients))
			}
			results[i] = l.Client(ctx, w, ranked, bearer, t0, t1)
		})
	}
	start := time.Now()
	t0, t1 = start.Add(Warmup), start.Add(Warmup+d)
	close(begin)
	wg.Wait()
	var lat []uint32
	for _, r := range results {
		lat = append(lat, r.Lat...)
		out.Requests += r.Requests
		out.Sent += r.Sent
		if !r.Answered {
			out.Unanswered++
		}
		out.Answers, out.Failures = benchreport.AddCounts(out.Answers, r.Answers), benchreport.AddCounts(out.Failures, r.Failures)
		if r.err != nil && ctx.Err() == nil {
			return out, r.err
		}
	}
	out.Seconds = d.Seconds()
	good := out.Answers[answerKey(l.Want, l.WantCode)]
	out.PerSec = float64(good) / out.Seconds
	slices.Sort(lat)
	if len(lat) > 0 {
		q := func(p float64) time.Duration {
			return time.Duration(lat[min(len(lat)-1, int(p*float64(len(lat))))]) * time.Microsecond
		}
		out.P50, out.P90, out.P99, out.Max = q(0.50), q(0.90), q(0.99), q(1)
	}
	if good == 0 {
		return out, fmt.Errorf("%s %s: no %s answer in %d requests (%s)", l.method, l.path, answerKey(l.Want, l.WantCode), out.Requests, render.Outcomes(out.Answers))
	}
	return out, ctx.Err()
}

type benchClientResult struct {
	Lat      []uint32 // microseconds, requests started in the window
	Requests int      // started in the window
	Answered bool     // at least one request got an answer
	Sent     int
	Answers  map[string]int
	Failures map[string]int
	err      error
}

// client is one keep-alive client: it sends until t1 and keeps what
// started in [t0, t1). A transport error moves it to the next instance of
// its ranking; 503 overloaded makes it wait the second the answer asks
// for, as a well-behaved client would.
func (l benchLoad) Client(ctx context.Context, w *wireClient, ranked []*url.URL, Bearer func(*Minter) string, t0, t1 time.Time) benchClientResult {
	u := ranked[0]
	res := benchClientResult{Answers: map[string]int{}, Lat: make([]uint32, 0, 1024)}
	buf := make([]byte, 2048)
	var m *Minter
	if l.Users != nil {
		m = l.Users.Minter()
	}
	errs := 0
	for ctx.Err() == nil {
		start := time.Now()
		if !start.Before(t1) {
			break
		}
		auth := ""
		if l.Users != nil {
			auth = Bearer(m)
		}
		status, code, err := w.do(ctx, l.method, u, auth, buf)
		res.Sent++
		res.Answered = res.Answered || status != 0
		if !start.Before(t0) {
			res.Requests++
			res.Lat = append(res.Lat, uint32(min(time.Since(start).Microseconds(), 1<<32-1)))
			res.Answers[answerKey(status, code)]++
		}
		if err != nil {
			if !start.Before(t0) {
				if res.Failures == nil {
					res.Failures = map[string]int{}
				}
				res.Failures[failureOf(err)]++
			}
			if errs++; errs > 100 {
				res.err = fmt.Errorf("%s %s: %w", l.method, u, err)
				break
			}
			u = ranked[errs%len(ranked)]
			time.Sleep(10 * time.Millisecond) // the server went away or refused: do not spin
		} else if code == "overloaded" {
			time.Sleep(time.Second) // its Retry-After
		}
	}
	return res
}

// failureOf is the part of a request's error that says what happened
// (the dialer and the reader wrap it in what they were doing).
func failureOf(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// problemCode finds "code":"..." in a problem+json body without decoding it.
func problemCode(b []byte) string {
	_, rest, ok := bytes.Cut(b, []byte(`"code":`))
	if !ok {
		return ""
	}
	rest = bytes.TrimLeft(rest, " ")
	if len(rest) == 0 || rest[0] != '"' {
		return ""
	}
	end := bytes.IndexByte(rest[1:], '"')
	if end < 0 {
		return ""
	}
	return knownCode(rest[1 : 1+end])
}

// knownCode interns the codes the bench expects so counting them allocates
// nothing.
func knownCode(b []byte) string {
	for _, c := range []string{"sold_out", "busy", "unavailable", "overloaded", "rate_limited", "insufficient_stock"} {
		if string(b) == c {
			return c
		}
	}
	return string(b)
}

func answerKey(status int, code string) string {
	switch {
	case status == 0:
		return "no answer"
	case code != "":
		return statusText(status) + " " + code
	}
	return statusText(status)
}

var statusTexts = func() map[int]string {
	m := map[int]string{}
	for s := 100; s < 600; s++ {
		m[s] = strconv.Itoa(s)
	}
	return m
}()

func statusText(s int) string {
	if t, ok := statusTexts[s]; ok {
		return t
	}
	return strconv.Itoa(s)
}
