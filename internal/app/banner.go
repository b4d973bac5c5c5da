package app

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/seckill-lab/shop/internal/platform"
)

// startInfo is what a person who just started the shop needs next: where
// the page is, how to get into the operator view, where the docs start and
// how to start over. The log above it may be long; this comes last.
type startInfo struct {
	addr           net.Addr
	adminToken     string
	tokenGenerated bool   // the token was generated at start (SHOP_ADMIN_TOKEN unset)
	embeddedRedis  string // redis://host:port of the in-process Redis, or ""
	sqlitePath     string // the embedded database file, or "" on MySQL
	demoCatalog    bool   // the demo catalog was created (or found) at start
	logLevel       string
}

// pageURL is the address a browser on this machine opens: a wildcard
// listener (":8080") is reached as localhost.
func pageURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String() + "/"
	}
	host := "localhost"
	if tcp.IP != nil && !tcp.IP.IsUnspecified() && !tcp.IP.IsLoopback() {
		host = tcp.IP.String()
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port)) + "/"
}

// writeStartInfo prints the start-up summary once the shop is ready. It
// goes to stdout, apart from the log on stderr, so it reads as text.
func writeStartInfo(w io.Writer, s startInfo) {
	url := pageURL(s.addr)
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "  %-13s %s\n", k, v) }
	b.WriteString("\nshop is ready\n")
	line("page", url+"  (shopper view; the operator view needs the admin token)")
	switch {
	case s.tokenGenerated:
		line("admin token", s.adminToken+"  (generated now, new at every start; set SHOP_ADMIN_TOKEN to keep one)")
	case s.sqlitePath != "":
		// A demo shop: the token is a demo value, and the newcomer needs it
		// to open the operator view.
		line("admin token", s.adminToken+"  (from SHOP_ADMIN_TOKEN or --admin-token; paste it into the page's operator view)")
	default:
		// A real database: a configured secret stays out of the terminal.
		line("admin token", "not printed: the value you set in SHOP_ADMIN_TOKEN (or --admin-token)")
	}
	if s.embeddedRedis != "" {
		line("redis", s.embeddedRedis+"  (in-process; export SHOP_REDIS_URL="+s.embeddedRedis+" for `shop lab lock` and redis-cli)")
	}
	line("docs", "docs/README.md in the repository (start there; set SHOP="+strings.TrimSuffix(url, "/")+" for the chapters' commands)")
	if s.demoCatalog {
		line("demo catalog", "a flash-sale item and regular items; demo users 1-20 start with $100.00 (log in as one of them)")
	}
	if s.sqlitePath != "" {
		line("reset demo", "stop the shop (Ctrl-C), delete "+s.sqlitePath+", start it again")
	} else {
		line("reset demo", "the data lives in the SHOP_MYSQL_DSN database: drop and recreate it, then start again")
	}
	if !strings.EqualFold(s.logLevel, "debug") {
		line("quiet log", "successful reads (the page polls) and simulated race buyers log at debug; --log-level debug shows them")
	}
	b.WriteString("\n")
	_, _ = io.WriteString(w, b.String())
}

// startInfoOf collects the summary of a configuration and its backends.
func startInfoOf(c platform.Config, addr net.Addr, generated bool, rdb *platform.Redis) startInfo {
	s := startInfo{addr: addr, adminToken: c.AdminToken, tokenGenerated: generated, logLevel: c.LogLevel, demoCatalog: c.DemoCatalogOn()}
	if rdb != nil && rdb.Embedded != nil {
		s.embeddedRedis = "redis://" + rdb.Embedded.Addr()
	}
	if c.MySQLDSN == "" {
		s.sqlitePath = c.SQLitePath
	}
	return s
}
