package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/app"
	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/wire"
)

const labAdminToken = "lab-test-admin-token-0123456789"

// labLog collects a server's log and tells when it printed its address.
type labLog struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string
	sent bool
}

var listeningRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

func (l *labLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if m := listeningRE.FindSubmatch(l.buf.Bytes()); m != nil && !l.sent {
		l.sent = true
		l.addr <- string(m[1])
	}
	return len(p), nil
}

func (l *labLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startLabShop runs `shop serve` through app.Run, as the binary does, on a
// free loopback port and returns its base URL. args add settings.
func startLabShop(t *testing.T, args ...string) string {
	t.Helper()
	log := &labLog{addr: make(chan string, 1)}
	all := append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-token", labAdminToken, "--sweep-interval", "0"}, args...)
	shop := testenv.StartShop(t, app.Run, testenv.ShopOptions{Args: all, Log: log, StopWait: 30 * time.Second})
	var addr string
	shop.Until(t, 2*time.Minute, "listening address in the log", func() bool {
		select {
		case addr = <-log.addr:
			return true
		default:
			return false
		}
	})
	return "http://" + addr
}

// labEmbedded is the embedded default: SQLite in a temporary folder and the
// in-process Redis.
func labEmbedded(t *testing.T) []string {
	return []string{"--sqlite-path", filepath.Join(t.TempDir(), "shop.db")}
}

// labServices are real MySQL/MariaDB and Redis, as the rest of the suite uses.
func labServices(t *testing.T) []string {
	url, prefix := testenv.Redis(t)
	return []string{"--mysql-dsn", testenv.MySQL(t), "--redis-url", url, "--redis-prefix", prefix}
}

type labAnswer struct {
	status int
	header http.Header
	body   []byte
}

func labCall(t *testing.T, method, url, token, body string) labAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return labAnswer{res.StatusCode, res.Header, b}
}

func (a labAnswer) code() string {
	var p wire.Problem
	_ = json.Unmarshal(a.body, &p)
	return p.Code
}

func TestDemoPage(t *testing.T) {
	t.Parallel()
	base := startLabShop(t, labEmbedded(t)...)
	for _, tc := range []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script src="/assets/app.js" defer></script>`},
		{"/assets/app.js", "text/javascript; charset=utf-8", "/api/v1/seckill/"},
		// The shopper's list hides what lab races create by the name labrace gives them (labrace.ProductPrefix).
		{"/assets/app.js", "text/javascript; charset=utf-8", "const LAB_PREFIX = 'Lab race ';"},
		{"/assets/style.css", "text/css; charset=utf-8", ":root"},
		{"/assets/favicon.svg", "image/svg+xml", "<svg"},
	} {
		a := labCall(t, http.MethodGet, base+tc.path, "", "")
		if a.status != http.StatusOK || a.header.Get("Content-Type") != tc.contentType || !bytes.Contains(a.body, []byte(tc.contains)) {
			t.Errorf("GET %s: %d %q, want 200 %q with %q", tc.path, a.status, a.header.Get("Content-Type"), tc.contentType, tc.contains)
		}
		if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
	}
	for _, p := range []string{"/assets/", "/assets/nope.js", "/assets/index.html.bak", "/index.html"} {
		a := labCall(t, http.MethodGet, base+p, "", "")
		if a.status != http.StatusNotFound || a.header.Get("Content-Type") != "application/problem+json" || a.code() != "not_found" {
			t.Errorf("GET %s: %d %s %s, want 404 not_found problem", p, a.status, a.header.Get("Content-Type"), a.body)
		}
	}
}

// labSide is one side of a race as the API shows it.
type labSide struct {
	ProductID     int64         `json:"product_id"`
	StockStrategy string        `json:"stock_strategy"`
	Safe          bool          `json:"safe"`
	InitialStock  int64         `json:"initial_stock"`
	Created       int64         `json:"created"`
	SoldOut       int64         `json:"sold_out"`
	Replayed      int64         `json:"replayed"`
	Errors        int64         `json:"errors"`
	BuyersDone    int64         `json:"buyers_done"`
	Stock         int64         `json:"stock"`
	Oversold      int64         `json:"oversold"`
	Audit         *audit.Report `json:"audit"`
	Series        []struct {
		Created int64 `json:"created"`
		Stock   int64 `json:"stock"`
	} `json:"series"`
}

type labRace struct {
	RaceID        string        `json:"race_id"`
	Sides         []labSide     `json:"sides"`
	ProductID     int64         `json:"product_id"`
	Buyers        int           `json:"buyers"`
	StockStrategy string        `json:"stock_strategy"`
	InitialStock  int64         `json:"initial_stock"`
	Sent          int64         `json:"sent"`
	Created       int64         `json:"created"`
	Replayed      int64         `json:"replayed"`
	SoldOut       int64         `json:"sold_out"`
	Busy          int64         `json:"busy"`
	Errors        int64         `json:"errors"`
	BuyersDone    int64         `json:"buyers_done"`
	Stock         int64         `json:"stock"`
	Oversold      int64         `json:"oversold"`
	Done          bool          `json:"done"`
	Audit         *audit.Report `json:"audit"`
	Error         *string       `json:"error"`
	Series        []struct {
		Created int64 `json:"created"`
	} `json:"series"`
}

func runLabRace(t *testing.T, base, body string) labRace {
	t.Helper()
	return watchLabRace(t, base, body, nil)
}

// watchLabRace runs a race and hands every progress answer to frame.
func watchLabRace(t *testing.T, base, body string, frame func(labRace)) labRace {
	t.Helper()
	a := labCall(t, http.MethodPost, base+"/api/v1/admin/lab/races", labAdminToken, body)
	var r labRace
	if err := json.Unmarshal(a.body, &r); a.status != http.StatusAccepted || err != nil || r.RaceID == "" {
		t.Fatalf("start race: %d %s", a.status, a.body)
	}
	if loc := a.header.Get("Location"); loc != "/api/v1/admin/lab/races/"+r.RaceID {
		t.Errorf("Location %q", loc)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for !r.Done {
		if time.Now().After(deadline) {
			t.Fatalf("race %s not done after 5 minutes: %+v", r.RaceID, r)
		}
		time.Sleep(50 * time.Millisecond)
		a := labCall(t, http.MethodGet, base+"/api/v1/admin/lab/races/"+r.RaceID, labAdminToken, "")
		r = labRace{}
		if err := json.Unmarshal(a.body, &r); a.status != http.StatusOK || err != nil {
			t.Fatalf("race progress: %d %s", a.status, a.body)
		}
		if frame != nil {
			frame(r)
		}
	}
	return r
}

func TestLabRace(t *testing.T) {
	t.Parallel()
	base := startLabShop(t, labServices(t)...)
	races := base + "/api/v1/admin/lab/races"

	tok := labCall(t, http.MethodPost, base+"/api/v1/auth/token", "", `{"user_id": 7}`)
	var user wire.Login
	if err := json.Unmarshal(tok.body, &user); tok.status != http.StatusOK || err != nil {
		t.Fatalf("demo login: %d %s", tok.status, tok.body)
	}

	t.Run("admin only", func(t *testing.T) {
		for _, tc := range []struct {
			method, path, token, body, code string
			status                          int
		}{
			{http.MethodPost, races, "", `{"buyers": 10, "stock": 1}`, "unauthenticated", 401},
			{http.MethodPost, races, user.Token, `{"buyers": 10, "stock": 1}`, "forbidden", 403},
			{http.MethodGet, races + "/r1", user.Token, "", "forbidden", 403},
			{http.MethodGet, base + "/api/v1/admin/lab/info", user.Token, "", "forbidden", 403},
		} {
			a := labCall(t, tc.method, tc.path, tc.token, tc.body)
			if a.status != tc.status || a.code() != tc.code {
				t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, a.status, a.body, tc.status, tc.code)
			}
		}
	})

	t.Run("bounded and validated", func(t *testing.T) {
		for _, tc := range []struct {
			body, field string
		}{
			{`{"buyers": 5001, "stock": 10}`, "buyers"},
			{`{"buyers": 0, "stock": 10}`, "buyers"},
			{`{"stock": 10}`, "buyers"},
			{`{"buyers": 10}`, "stock"},
			{`{"buyers": 10, "stock": 10, "product_id": 1}`, "stock"},
			{`{"buyers": 10, "stock": 0}`, "stock"},
			{`{"buyers": 10, "product_id": -1}`, "product_id"},
			{`{"buyers": 10, "stock": 1, "concurrency": 501}`, "concurrency"},
			{`{"buyers": 10, "stock": 1, "extra": true}`, "extra"},
			{`{"buyers": 10, "stock": 1, "strategies": []}`, "strategies"},
			{`{"buyers": 10, "stock": 1, "strategies": ["lock-fence", "naive", "lock"]}`, "strategies"},
			{`{"buyers": 10, "stock": 1, "strategies": ["lock-fence", "unknown"]}`, "strategies"},
			{`{"buyers": 10, "product_id": 1, "strategies": ["naive"]}`, "strategies"},
		} {
			a := labCall(t, http.MethodPost, races, labAdminToken, tc.body)
			var p wire.Problem
			_ = json.Unmarshal(a.body, &p)
			if a.status != http.StatusBadRequest || p.Code != "invalid_request" || p.Errors[tc.field] == "" {
				t.Errorf("%s: %d %s, want 400 invalid_request on %s", tc.body, a.status, a.body, tc.field)
			}
		}
		if a := labCall(t, http.MethodPost, races, labAdminToken, `{"buyers": 10, "product_id": 999999}`); a.status != 404 || a.code() != "not_found" {
			t.Errorf("unknown product: %d %s", a.status, a.body)
		}
		if a := labCall(t, http.MethodGet, races+"/nope", labAdminToken, ""); a.status != 404 || a.code() != "not_found" {
			t.Errorf("unknown race: %d %s", a.status, a.body)
		}
	})

	t.Run("info", func(t *testing.T) {
		a := labCall(t, http.MethodGet, base+"/api/v1/admin/lab/info", labAdminToken, "")
		var info struct {
			StockStrategy string `json:"stock_strategy"`
			Safe          bool   `json:"safe"`
			MaxBuyers     int    `json:"max_buyers"`
			SelfURL       string `json:"self_url"`
		}
		if err := json.Unmarshal(a.body, &info); err != nil || a.status != 200 || info.StockStrategy != "lock-fence" ||
			!info.Safe || info.MaxBuyers != 5000 || info.SelfURL != base {
			t.Errorf("lab info: %d %s (want self_url %s)", a.status, a.body, base)
		}
	})

	t.Run("a race sells exactly its stock", func(t *testing.T) {
		r := runLabRace(t, base, `{"buyers": 60, "stock": 12, "concurrency": 8}`)
		if r.Error != nil || r.Audit == nil || !r.Audit.OK {
			t.Fatalf("race: %+v, audit %+v", r, r.Audit)
		}
		if r.Created != 12 || r.Stock != 0 || r.Oversold != 0 || r.BuyersDone != 60 || r.Errors != 0 ||
			r.Created+r.SoldOut+r.Replayed > 60 || r.StockStrategy != "lock-fence" || len(r.Series) == 0 {
			t.Errorf("race figures: %+v", r)
		}
		if len(r.Audit.Products) != 1 || r.Audit.Products[0].ProductID != r.ProductID || r.Audit.Products[0].Sold != 12 {
			t.Errorf("audit of the race's product: %+v", r.Audit.Products)
		}
		if len(r.Sides) != 1 || r.Sides[0].ProductID != r.ProductID || r.Sides[0].Created != r.Created {
			t.Errorf("a one-sided race is its first side at the top level: %+v", r)
		}
		// The same product again: its stock is gone, every new buyer is sold out.
		again := runLabRace(t, base, `{"buyers": 20, "product_id": `+jsonInt(r.ProductID)+`}`)
		if again.Created != 0 || again.SoldOut+again.Replayed != 20 || again.Audit == nil || !again.Audit.OK {
			t.Errorf("second race on a sold-out product: %+v", again)
		}
	})

	t.Run("side by side: the same load on lock-fence and naive at once", func(t *testing.T) {
		frames := 0
		check := func(r labRace) {
			frames++
			for _, s := range r.Sides {
				if !s.Safe {
					continue
				}
				// Item 8: counters and stock from one snapshot, so a safe
				// side never shows more orders + stock than units.
				if s.Created+s.Stock > s.InitialStock {
					t.Errorf("frame %d: %s side shows %d orders + %d stock > %d units", frames, s.StockStrategy, s.Created, s.Stock, s.InitialStock)
				}
				for _, p := range s.Series {
					if p.Created+p.Stock > s.InitialStock {
						t.Errorf("frame %d: %s series point %d orders + %d stock > %d units", frames, s.StockStrategy, p.Created, p.Stock, s.InitialStock)
					}
				}
			}
		}
		r := watchLabRace(t, base, `{"buyers": 150, "stock": 15, "concurrency": 30, "strategies": ["lock-fence", "naive"]}`, check)
		if len(r.Sides) != 2 {
			t.Fatalf("sides: %+v", r)
		}
		safe, naive := r.Sides[0], r.Sides[1]
		if safe.StockStrategy != "lock-fence" || !safe.Safe || naive.StockStrategy != "naive" || naive.Safe || safe.ProductID == naive.ProductID {
			t.Errorf("sides: %+v / %+v", safe, naive)
		}
		if safe.Created != 15 || safe.Stock != 0 || safe.Oversold != 0 || safe.Audit == nil || !safe.Audit.OK {
			t.Errorf("safe side: %+v, audit %+v", safe, safe.Audit)
		}
		if naive.Audit == nil || naive.BuyersDone != 150 {
			t.Fatalf("naive side: %+v", naive)
		}
		// The one definition: units held beyond units added, from the audit.
		p := naive.Audit.Products[0]
		if naive.Oversold != p.Oversold() || naive.Oversold != max(0, p.Sold-p.Cancelled-p.Added) {
			t.Errorf("naive side oversold %d, audit summary %+v", naive.Oversold, p)
		}
		if (naive.Oversold > 0 || naive.Created+naive.Stock != naive.InitialStock) == naive.Audit.OK {
			t.Errorf("naive side: %d orders, stock %d for %d units, yet audit ok %v", naive.Created, naive.Stock, naive.InitialStock, naive.Audit.OK)
		}
		t.Logf("side by side, %d frames: lock-fence %d orders, naive %d orders (oversold %d, stock %d), naive audit ok %v",
			frames, safe.Created, naive.Created, naive.Oversold, naive.Stock, naive.Audit.OK)
		// The products are named for the page's filter, and the server's
		// strategy is untouched.
		for _, s := range r.Sides {
			a := labCall(t, http.MethodGet, base+"/api/v1/products/"+jsonInt(s.ProductID), "", "")
			if !bytes.Contains(a.body, []byte(`"name":"Lab race `+r.RaceID+` · `+s.StockStrategy+`"`)) {
				t.Errorf("product of the %s side: %s", s.StockStrategy, a.body)
			}
		}
		// The shop-wide audit stays green: both race products are lab
		// products, the naive side's oversell is a lab finding.
		var all audit.Report
		if a := labCall(t, http.MethodGet, base+"/api/v1/admin/audit", labAdminToken, ""); a.status != 200 || json.Unmarshal(a.body, &all) != nil {
			t.Fatalf("shop-wide audit: %d %s", a.status, a.body)
		}
		if !all.OK || all.Lab == nil {
			t.Fatalf("shop-wide audit after a side-by-side race: %+v", all)
		}
		lab := map[int64]string{}
		for _, p := range all.Lab.Products {
			lab[p.ProductID] = p.StockStrategy
		}
		for _, p := range all.Products {
			if p.ProductID == safe.ProductID || p.ProductID == naive.ProductID {
				t.Errorf("race product %d among the shop's products", p.ProductID)
			}
		}
		if lab[safe.ProductID] != "lock-fence" || lab[naive.ProductID] != "naive" {
			t.Errorf("lab products: %+v", all.Lab.Products)
		}
		if (len(all.Lab.Violations) > 0) == naive.Audit.OK {
			t.Errorf("lab violations %+v, naive side's own audit ok %v", all.Lab.Violations, naive.Audit.OK)
		}
		a := labCall(t, http.MethodGet, base+"/api/v1/admin/lab/info", labAdminToken, "")
		if !bytes.Contains(a.body, []byte(`"stock_strategy":"lock-fence"`)) ||
			!bytes.Contains(a.body, []byte(`{"name":"naive","oversells":true`)) || !bytes.Contains(a.body, []byte(`{"name":"lock","oversells":false`)) {
			t.Errorf("lab info after a side-by-side race: %s", a.body)
		}
	})
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestLabRaceNaive checks the verdict, not the timing: whether or not the
// unsafe strategy oversold this time, the audit must say so exactly when
// the numbers disagree.
func TestLabRaceNaive(t *testing.T) {
	t.Parallel()
	base := startLabShop(t, append(labEmbedded(t), "--stock-strategy", "naive")...)
	a := labCall(t, http.MethodGet, base+"/api/v1/admin/lab/info", labAdminToken, "")
	if !bytes.Contains(a.body, []byte(`"stock_strategy":"naive"`)) || !bytes.Contains(a.body, []byte(`"safe":false`)) {
		t.Errorf("lab info under naive: %s", a.body)
	}
	r := runLabRace(t, base, `{"buyers": 150, "stock": 15, "concurrency": 30}`)
	if r.Audit == nil {
		t.Fatalf("no audit: %+v", r)
	}
	if r.Oversold > 0 && r.Audit.OK {
		t.Errorf("oversold by %d but the audit is green: %+v", r.Oversold, r.Audit)
	}
	t.Logf("naive: %d orders for %d units, stock %d, audit ok %v", r.Created, r.InitialStock, r.Stock, r.Audit.OK)

	// A race of the shop's own buyers on one of its own products: the shop
	// runs naive, so whatever that product suffered is the shop's fault
	// and the shop-wide audit says so (lab products are no hiding place).
	p := labCall(t, http.MethodPost, base+"/api/v1/admin/products", labAdminToken, `{"name": "own", "price_cents": 100, "stock": 15}`)
	var own struct {
		ID int64 `json:"id"`
	}
	if p.status != 201 || json.Unmarshal(p.body, &own) != nil {
		t.Fatalf("create: %d %s", p.status, p.body)
	}
	r = runLabRace(t, base, `{"buyers": 150, "product_id": `+jsonInt(own.ID)+`, "concurrency": 30}`)
	var all audit.Report
	if a := labCall(t, http.MethodGet, base+"/api/v1/admin/audit", labAdminToken, ""); a.status != 200 || json.Unmarshal(a.body, &all) != nil {
		t.Fatalf("shop-wide audit: %d %s", a.status, a.body)
	}
	if r.Audit == nil || all.OK != r.Audit.OK {
		t.Errorf("own product raced naive: its audit %+v, the shop's ok %v", r.Audit, all.OK)
	}
	for _, v := range all.Lab.Violations {
		if v.ProductID == own.ID {
			t.Errorf("the shop's own product reported as a lab finding: %+v", v)
		}
	}
	t.Logf("naive, own product: %d orders for 15 units, shop audit ok %v", r.Created, all.OK)
}

func TestLabRoutesOff(t *testing.T) {
	t.Parallel()
	base := startLabShop(t, append(labEmbedded(t), "--lab-routes=false")...)
	for _, p := range []string{"/api/v1/admin/lab/info", "/api/v1/admin/lab/races/r1"} {
		if a := labCall(t, http.MethodGet, base+p, labAdminToken, ""); a.status != http.StatusNotFound {
			t.Errorf("GET %s with lab routes off: %d %s", p, a.status, a.body)
		}
	}
	if a := labCall(t, http.MethodGet, base+"/", "", ""); a.status != http.StatusOK {
		t.Errorf("the page needs no lab routes: GET / %d", a.status)
	}
}
