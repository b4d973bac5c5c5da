package topo

import (
	"os"
	"strings"
	"testing"
)

// deploy/nginx.conf maps onto loopback with every upstream server and the
// affinity hash kept.
func TestNginxConfMapsTheShippedConfig(t *testing.T) {
	conf, err := os.ReadFile("../../deploy/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	got, err := nginxConf(string(conf), 4321, []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"}, "/tmp/e.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"listen 127.0.0.1:4321;", "server 127.0.0.1:1 ", "server 127.0.0.1:3 ", "hash $shop_affinity consistent;", "access_log off;"} {
		if !strings.Contains(got, want) {
			t.Errorf("mapped nginx.conf lacks %q", want)
		}
	}
	one, err := nginxConf(string(conf), 4321, []string{"http://127.0.0.1:1"}, "/tmp/e.log")
	if err != nil || strings.Count(one, "server 127.0.0.1:1 ") != 3 {
		t.Errorf("one shop: every upstream server should be it (%v):\n%s", err, one)
	}
	if _, err := nginxConf(string(conf), 4321, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, "/tmp/e.log"); err == nil {
		t.Error("three upstreams mapped onto two shops without an error")
	}
}
