package platform

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	c, rest, err := LoadConfig("shop", nil, env(nil), io.Discard)
	if err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	if len(rest) != 0 {
		t.Errorf("rest = %q", rest)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Addr", c.Addr, ":8080"},
		{"MySQLDSN", c.MySQLDSN, ""},
		{"SQLitePath", c.SQLitePath, "./shop.db"},
		{"RedisURL", c.RedisURL, ""},
		{"RedisPrefix", c.RedisPrefix, "shop:"},
		{"EmbeddedRedis", c.EmbeddedRedis, "127.0.0.1:0"},
		{"AdminToken", c.AdminToken, ""},
		{"AuthSecret", c.AuthSecret, ""},
		{"TokenTTL", c.TokenTTL, 24 * time.Hour},
		{"DemoLogin", c.DemoLogin, true},
		{"PaymentTimeout", c.PaymentTimeout, 15 * time.Minute},
		{"SweepInterval", c.SweepInterval, 5 * time.Second},
		{"LockTTL", c.LockTTL, 5 * time.Second},
		{"LockWait", c.LockWait, 2 * time.Second},
		{"IdemRetention", c.IdemRetention, 24 * time.Hour},
		{"IdemLease", c.IdemLease, 30 * time.Second},
		{"SoldOutCache", c.SoldOutCache, time.Second},
		{"StockStrategy", c.StockStrategy, inventory.LockFence},
		{"ShutdownWait", c.ShutdownWait, 10 * time.Second},
		{"LogLevel", c.LogLevel, "info"},
		{"LogFormat", c.LogFormat, "text"},
		{"LabRoutes", c.LabRoutes, true},
		{"LabPauseAfterLock", c.LabPauseAfterLock, time.Duration(0)},
		{"LabPauseProbability", c.LabPauseProbability, 1.0},
		{"LabSlowPayment", c.LabSlowPayment, time.Duration(0)},
		{"LabNoIdempotency", c.LabNoIdempotency, false},
		{"ReadTimeout", c.ReadTimeout, 10 * time.Second},
		{"RequestTimeout", c.RequestTimeout, 30 * time.Second},
		{"MaxConns", c.MaxConns, 1024},
		{"RateOrders", c.RateOrders, Rate{N: 5, Per: time.Second, Burst: 30}},
		{"RatePay", c.RatePay, Rate{N: 5, Per: time.Second, Burst: 20}},
		{"RateFormTokens", c.RateFormTokens, Rate{N: 5, Per: time.Second, Burst: 20}},
		{"RateLogin", c.RateLogin, Rate{N: 200, Per: time.Second, Burst: 10000}},
		{"UnpaidUnits", c.UnpaidUnits, int64(100)},
		{"StockBuckets", c.StockBuckets, int64(1)},
		{"HomeBucket", c.HomeBucket, int64(-1)},
	}
	if c.TrustedProxies != nil {
		t.Errorf("TrustedProxies = %q, want none", c.TrustedProxies)
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if lab := c.Lab(); len(lab) != 0 {
		t.Errorf("defaults turn lab switches on: %v", lab)
	}
}

func TestLoadConfigEnvironment(t *testing.T) {
	t.Parallel()
	c, _, err := LoadConfig("shop", nil, env(map[string]string{
		"SHOP_ADDR":           "127.0.0.1:9000",
		"SHOP_MYSQL_DSN":      "root@tcp(db:3306)/shop",
		"SHOP_REDIS_URL":      "redis://cache:6379/2",
		"SHOP_LOCK_TTL":       "7s",
		"SHOP_DEMO_LOGIN":     "false",
		"SHOP_STOCK_STRATEGY": "naive",
		"SHOP_LOG_FORMAT":     "json",
		"SHOP_ADMIN_TOKEN":    "0123456789abcdef",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:9000" || c.MySQLDSN != "root@tcp(db:3306)/shop" || c.RedisURL != "redis://cache:6379/2" ||
		c.LockTTL != 7*time.Second || c.DemoLogin || c.StockStrategy != inventory.Naive || c.LogFormat != "json" ||
		c.AdminToken != "0123456789abcdef" {
		t.Errorf("environment not applied: %+v", c)
	}
	if lab := c.Lab(); len(lab) != 1 || lab[0] != "stock-strategy=naive" {
		t.Errorf("Lab() = %v, want the unsafe strategy named", lab)
	}
}

func TestLoadConfigFlagWinsOverEnvironment(t *testing.T) {
	t.Parallel()
	getenv := env(map[string]string{"SHOP_LOCK_TTL": "7s", "SHOP_ADDR": ":7000", "SHOP_DEMO_LOGIN": "false"})
	c, rest, err := LoadConfig("shop", []string{"--lock-ttl", "9s", "-addr=:9100", "--demo-login=true", "extra"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.LockTTL != 9*time.Second || c.Addr != ":9100" || !c.DemoLogin {
		t.Errorf("flags did not win: lock ttl %s, addr %q, demo login %v", c.LockTTL, c.Addr, c.DemoLogin)
	}
	if len(rest) != 1 || rest[0] != "extra" {
		t.Errorf("rest = %q, want [extra]", rest)
	}
}

func TestLoadConfigInvalidNamesVariable(t *testing.T) {
	t.Parallel()
	tests := []struct{ env, value string }{
		{"SHOP_LOCK_TTL", "abc"},
		{"SHOP_LOCK_TTL", "10ms"},
		{"SHOP_LOCK_TTL", "0s"},
		{"SHOP_STOCK_STRATEGY", "bogus"},
		{"SHOP_TOKEN_TTL", "-1h"},
		{"SHOP_PAYMENT_TIMEOUT", "soon"},
		{"SHOP_IDEM_RETENTION", "0s"},
		{"SHOP_IDEM_LEASE", "-5s"},
		{"SHOP_LOCK_WAIT", "-1s"},
		{"SHOP_SWEEP_INTERVAL", "-1s"},
		{"SHOP_SOLD_OUT_CACHE", "x"},
		{"SHOP_SHUTDOWN_WAIT", "-2s"},
		{"SHOP_DEMO_LOGIN", "maybe"},
		{"SHOP_LAB_ROUTES", "yes please"},
		{"SHOP_LAB_NO_IDEMPOTENCY", "2"},
		{"SHOP_LAB_PAUSE_AFTER_LOCK", "-1s"},
		{"SHOP_LAB_PAUSE_PROBABILITY", "2"},
		{"SHOP_LAB_PAUSE_PROBABILITY", "often"},
		{"SHOP_LAB_SLOW_PAYMENT", "-1ms"},
		{"SHOP_LOG_LEVEL", "loud"},
		{"SHOP_LOG_FORMAT", "xml"},
		{"SHOP_REDIS_URL", "http://cache:6379"},
		{"SHOP_ADMIN_TOKEN", "short"},
		{"SHOP_AUTH_SECRET", "short"},
		{"SHOP_STOCK_BUCKETS", "0"},
		{"SHOP_STOCK_BUCKETS", "65"},
		{"SHOP_HOME_BUCKET", "-1"},
	}
	for _, tt := range tests {
		t.Run(tt.env+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			_, _, err := LoadConfig("shop", nil, env(map[string]string{tt.env: tt.value}), io.Discard)
			if err == nil {
				t.Fatalf("%s=%q accepted", tt.env, tt.value)
			}
			if !strings.Contains(err.Error(), tt.env) {
				t.Errorf("error %q does not name %s", err, tt.env)
			}
		})
	}
}

// Stock buckets need lock-fence: the shop refuses to start otherwise.
func TestLoadConfigBucketsNeedLockFence(t *testing.T) {
	t.Parallel()
	_, _, err := LoadConfig("shop", []string{"--stock-buckets=3", "--home-bucket=2"}, env(map[string]string{"SHOP_STOCK_STRATEGY": "redis-gate"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SHOP_STOCK_BUCKETS") || !strings.Contains(err.Error(), "lock-fence") {
		t.Fatalf("3 buckets under redis-gate: err = %v, want it refused, naming SHOP_STOCK_BUCKETS and lock-fence", err)
	}
	c, _, err := LoadConfig("shop", []string{"--stock-buckets=3", "--home-bucket=2"}, env(nil), io.Discard)
	if err != nil || c.StockBuckets != 3 || c.HomeBucket != 2 {
		t.Fatalf("3 buckets, home 2: %+v, %v", c, err)
	}
}

func TestLoadConfigInvalidFlagNamesVariableAndFlag(t *testing.T) {
	t.Parallel()
	_, _, err := LoadConfig("shop", []string{"--lock-ttl=abc"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SHOP_LOCK_TTL") || !strings.Contains(err.Error(), "--lock-ttl") {
		t.Fatalf("err = %v, want it to name SHOP_LOCK_TTL and --lock-ttl", err)
	}
	_, _, err = LoadConfig("shop", []string{"--addr="}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SHOP_ADDR") {
		t.Fatalf("empty --addr: err = %v, want it to name SHOP_ADDR", err)
	}
	_, _, err = LoadConfig("shop", []string{"--sqlite-path="}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SHOP_SQLITE_PATH") {
		t.Fatalf("no database: err = %v, want it to name SHOP_SQLITE_PATH", err)
	}
	if _, _, err := LoadConfig("shop", []string{"--no-such-flag"}, env(nil), io.Discard); err == nil {
		t.Fatal("unknown flag accepted")
	}
}

func TestLoadConfigReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, _, err := LoadConfig("shop", nil, env(map[string]string{"SHOP_LOG_LEVEL": "loud", "SHOP_STOCK_STRATEGY": "bogus"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SHOP_LOG_LEVEL") || !strings.Contains(err.Error(), "SHOP_STOCK_STRATEGY") {
		t.Fatalf("err = %v, want both variables named", err)
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	good := map[string]Rate{
		"off": {}, "0": {}, "5/s": {5, time.Second, 5}, "5/s:30": {5, time.Second, 30},
		"100/m:10": {100, time.Minute, 10}, "3/10s": {3, 10 * time.Second, 3}, "1/h:1": {1, time.Hour, 1},
	}
	for v, want := range good {
		if got, err := parseRate(v); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "5", "x/s", "0/s", "-1/s", "5/s:0", "5/s:x", "5/yr", "5/-1s", "5/s:3:4"} {
		if _, err := parseRate(v); err == nil {
			t.Errorf("parseRate(%q) accepted", v)
		}
	}
	_, _, err := LoadConfig("shop", nil, env(map[string]string{"SHOP_RATE_PAY": "fast"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SHOP_RATE_PAY") {
		t.Errorf("bad rate: err = %v, want it to name SHOP_RATE_PAY", err)
	}
	c, _, err := LoadConfig("shop", []string{"--trusted-proxies", "10.0.0.0/8, 127.0.0.1"}, env(nil), io.Discard)
	if err != nil || len(c.TrustedProxies) != 2 || c.TrustedProxies[1] != "127.0.0.1" {
		t.Errorf("trusted proxies = %q, %v", c.TrustedProxies, err)
	}
}

func TestSettingsAreComplete(t *testing.T) {
	t.Parallel()
	seenEnv, seenFlag := map[string]bool{}, map[string]bool{}
	for _, s := range Settings() {
		env, flag, usage := s[0], s[1], s[3]
		// SHOP_ is the shop's own; OTEL_ are OpenTelemetry's standard names.
		if !(strings.HasPrefix(env, "SHOP_") || strings.HasPrefix(env, "OTEL_")) || !strings.HasPrefix(flag, "--") || usage == "" {
			t.Errorf("malformed setting %q", s)
		}
		if seenEnv[env] || seenFlag[flag] {
			t.Errorf("duplicate setting %q", s)
		}
		seenEnv[env], seenFlag[flag] = true, true
		// The flag is the variable's name, lower case, dashes for underscores.
		if want := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "SHOP_")), "_", "-"); flag != want {
			t.Errorf("%s: flag %s, want %s", env, flag, want)
		}
	}
	// Each default must be accepted on its own when given explicitly.
	for _, s := range Settings() {
		if s[2] == "" {
			continue
		}
		if _, _, err := LoadConfig("shop", nil, env(map[string]string{s[0]: s[2]}), io.Discard); err != nil {
			t.Errorf("%s=%q (its default) rejected: %v", s[0], s[2], err)
		}
	}
}
