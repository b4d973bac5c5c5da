package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/testenv"
)

// catalog reads the shopper's product list and one demo user's wallet.
func catalog(t *testing.T, base string) (names []string, balance int64) {
	t.Helper()
	status, _, body := get(t, base+"/api/v1/products?limit=200")
	var list struct {
		Items []struct {
			Name  string `json:"name"`
			Stock int64  `json:"stock"`
		} `json:"items"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("products: %d %s", status, body)
	}
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/auth/token", strings.NewReader(`{"user_id": 3}`))
	req.Header.Set("Content-Type", "application/json")
	status, _, body = do(t, req)
	var login struct{ Token string }
	if status != http.StatusOK || json.Unmarshal(body, &login) != nil {
		t.Fatalf("login: %d %s", status, body)
	}
	req, _ = http.NewRequest(http.MethodGet, base+"/api/v1/wallet", nil)
	req.Header.Set("Authorization", "Bearer "+login.Token)
	status, _, body = do(t, req)
	var w struct {
		Balance int64 `json:"balance_cents"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &w) != nil {
		t.Fatalf("wallet: %d %s", status, body)
	}
	return names, w.Balance
}

// shopAudit is the shop-wide audit of a running shop.
func shopAudit(t *testing.T, base string) audit.Report {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/admin/audit", nil)
	req.Header.Set("Authorization", "Bearer test-admin-token-0123456789")
	status, _, body := do(t, req)
	var r audit.Report
	if status != http.StatusOK || json.Unmarshal(body, &r) != nil {
		t.Fatalf("audit: %d %s", status, body)
	}
	return r
}

// TestDemoCatalog: a fresh embedded shop shows the demo catalog before any
// admin action, a restart on the same file adds nothing, and the audit
// (ledger rows included) is green; on MySQL nothing is created unless
// SHOP_DEMO_CATALOG=true.
func TestDemoCatalog(t *testing.T) {
	t.Parallel()
	t.Run("embedded, twice", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{"SHOP_SQLITE_PATH": filepath.Join(t.TempDir(), "shop.db")}
		for start := 1; start <= 2; start++ {
			func() {
				ctx, stop := context.WithCancel(context.Background())
				defer stop()
				base, done := startServeUntil(t, ctx, env)
				names, balance := catalog(t, base)
				if len(names) != len(demoProducts) || !strings.HasPrefix(names[0], "Flash sale") || balance != demoCredit {
					t.Errorf("start %d: products %q, demo user 3's balance %d; want the %d demo products and %d cents",
						start, names, balance, len(demoProducts), demoCredit)
				}
				if r := shopAudit(t, base); !r.OK || len(r.Products) != len(demoProducts) || len(r.Wallets) != demoUsers {
					t.Errorf("start %d: audit %+v", start, r)
				}
				stop()
				if err := <-done; err != nil {
					t.Fatalf("start %d: serve returned %v", start, err)
				}
			}()
		}
	})
	t.Run("mysql: off unless asked", func(t *testing.T) {
		t.Parallel()
		dsn := testenv.MySQL(t)
		base := startServe(t, map[string]string{"SHOP_MYSQL_DSN": dsn})
		if names, balance := catalog(t, base); len(names) != 0 || balance != 0 {
			t.Errorf("MySQL with the default: products %q, balance %d; want none", names, balance)
		}
		on := startServe(t, map[string]string{"SHOP_MYSQL_DSN": dsn, "SHOP_DEMO_CATALOG": "true"})
		if names, balance := catalog(t, on); len(names) != len(demoProducts) || balance != demoCredit {
			t.Errorf("MySQL with SHOP_DEMO_CATALOG=true: products %q, balance %d", names, balance)
		}
	})
}

// startServeUntil runs `shop serve` until ctx ends, and returns its base URL
// and the channel Run's result arrives on (so a test can restart a shop on
// the same database).
func startServeUntil(t *testing.T, ctx context.Context, env map[string]string) (string, <-chan error) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	full := map[string]string{
		"SHOP_ADDR": addr, "SHOP_SWEEP_INTERVAL": "0", "SHOP_SHUTDOWN_WAIT": "2s",
		"SHOP_ADMIN_TOKEN": "test-admin-token-0123456789", "SHOP_AUTH_SECRET": "test-auth-secret-0123456789",
	}
	for k, v := range env {
		full[k] = v
	}
	done := make(chan error, 1)
	var out, log bytes.Buffer
	go func() { done <- Run(ctx, []string{"serve"}, func(k string) string { return full[k] }, &out, &log) }()
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			return base, done
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the shop did not answer /healthz within 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
