package app

import (
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/testenv"
)

// TestStartInfo starts the shop as a newcomer does (no settings but a port
// and a scratch database) and checks what it prints once ready: the page
// URL, the generated admin token (which must open the admin routes), the
// in-process Redis, the docs and how to reset; and that the page's polling
// (successful reads) stays out of the info log while writes are in it.
func TestStartInfo(t *testing.T) {
	port := testenv.FreePort(t)
	db := filepath.Join(t.TempDir(), "shop.db")
	env := map[string]string{
		"SHOP_ADDR":           "127.0.0.1:" + strconv.Itoa(port),
		"SHOP_SQLITE_PATH":    db,
		"SHOP_SWEEP_INTERVAL": "0",
		"SHOP_SHUTDOWN_WAIT":  "2s",
	}
	shop := testenv.StartShop(t, Run, testenv.ShopOptions{Getenv: func(k string) string { return env[k] }})
	stdout, logs := shop.Stdout, shop.Log
	shop.Until(t, 30*time.Second, "start-up summary on stdout", func() bool { return strings.Contains(stdout.String(), "shop is ready") })
	out := stdout.String()
	for _, want := range []string{
		"http://localhost:" + strconv.Itoa(port) + "/",
		"docs/README.md",
		"delete " + db,
		"export SHOP_REDIS_URL=redis://127.0.0.1:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up summary lacks %q:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`admin token\s+([0-9a-f]{48})\s`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("start-up summary has no generated admin token:\n%s", out)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/admin/audit", nil)
	req.Header.Set("Authorization", "Bearer "+m[1])
	if status, _, body := do(t, req); status != http.StatusOK {
		t.Errorf("the printed admin token: GET /api/v1/admin/audit = %d %s", status, body)
	}
	if strings.Contains(logs.String(), m[1]) {
		t.Errorf("the admin token is in the log too (it belongs in the summary only):\n%s", logs.String())
	}

	// The page polls products every second: not at info. A write is.
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/products", nil)
		do(t, req)
	}
	req, _ = http.NewRequest(http.MethodPost, base+"/api/v1/auth/token", strings.NewReader(`{"user_id": 1}`))
	req.Header.Set("Content-Type", "application/json")
	do(t, req)
	// A lab race's simulated buyers: thousands per race, not at info.
	req, _ = http.NewRequest(http.MethodPost, base+"/api/v1/auth/token", strings.NewReader(`{"user_id": 2}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", loadgen.UserAgent)
	do(t, req)
	time.Sleep(50 * time.Millisecond) // the access log is written after the response
	log := logs.String()
	if strings.Contains(log, "path=/api/v1/products") {
		t.Errorf("a successful GET /api/v1/products is logged at info:\n%s", log)
	}
	if n := strings.Count(log, "path=/api/v1/auth/token"); n != 1 {
		t.Errorf("POST /api/v1/auth/token is in the info log %d times, want 1 (the load generator's at debug):\n%s", n, log)
	}
}
