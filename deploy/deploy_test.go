package deploy

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/seckill-lab/shop/internal/platform"
)

type composeFile struct {
	Services map[string]service `yaml:"services"`
}

type service struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   any               `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.Unmarshal([]byte(readFile(t, "docker-compose.yml")), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// shops are the services that run `shop serve`.
func shops(c composeFile) []string {
	var out []string
	for name, s := range c.Services {
		if s.Image == "seckill-lab/shop:local" && slices.Equal(s.Command, []string{"serve"}) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// interpolate resolves compose's ${VAR:-default} to its default, as an
// unset environment would.
func interpolate(v string) string {
	return regexp.MustCompile(`\$\{[A-Z_]+:-([^}]*)\}`).ReplaceAllString(v, "$1")
}

func TestComposeServices(t *testing.T) {
	c := loadCompose(t)
	for _, name := range []string{"mysql", "redis", "migrate", "nginx"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("service %q missing", name)
		}
	}
	if got := c.Services["mysql"].Image; !strings.HasPrefix(got, "mysql:8") {
		t.Errorf("mysql image = %q, want mysql:8.x", got)
	}
	if got := c.Services["redis"].Image; !strings.HasPrefix(got, "redis:7") {
		t.Errorf("redis image = %q, want redis:7", got)
	}
	if got := c.Services["mysql"].Environment["MYSQL_DATABASE"]; got != "shop" {
		t.Errorf("mysql MYSQL_DATABASE = %q, want shop", got)
	}
	if got := c.Services["migrate"].Command; !slices.Equal(got, []string{"migrate"}) {
		t.Errorf("migrate command = %q, want [migrate]", got)
	}
	if got := shops(c); len(got) != 3 {
		t.Errorf("shop replicas = %v, want 3", got)
	}
}

func TestComposeHealthchecks(t *testing.T) {
	c := loadCompose(t)
	want := map[string]string{"mysql": "mysqladmin ping", "redis": "redis-cli", "nginx": "/nginx-health"}
	for name, needle := range want {
		hc := c.Services[name].Healthcheck
		if hc == nil || len(hc.Test) == 0 {
			t.Errorf("%s: no healthcheck", name)
			continue
		}
		if !strings.Contains(strings.Join(hc.Test, " "), needle) {
			t.Errorf("%s healthcheck %q does not mention %q", name, hc.Test, needle)
		}
	}
}

func TestComposeShopEnvironment(t *testing.T) {
	c := loadCompose(t)
	names := append(shops(c), "migrate")
	first := c.Services[names[0]].Environment
	for _, key := range []string{"SHOP_ADMIN_TOKEN", "SHOP_AUTH_SECRET"} {
		if first[key] == "" {
			t.Errorf("%s: %s unset: instances would generate different values", names[0], key)
		}
	}
	for _, name := range names {
		env := c.Services[name].Environment
		for _, key := range []string{"SHOP_ADMIN_TOKEN", "SHOP_AUTH_SECRET"} {
			if env[key] != first[key] {
				t.Errorf("%s: %s = %q, %s has %q: every instance needs the same", name, key, env[key], names[0], first[key])
			}
		}
		if dsn := env["SHOP_MYSQL_DSN"]; !strings.Contains(dsn, "@tcp(mysql:3306)/shop?") || !strings.Contains(dsn, "parseTime=true") {
			t.Errorf("%s: SHOP_MYSQL_DSN = %q, want ...@tcp(mysql:3306)/shop?parseTime=true...", name, dsn)
		}
		if got := env["SHOP_REDIS_URL"]; got != "redis://redis:6379/0" {
			t.Errorf("%s: SHOP_REDIS_URL = %q", name, got)
		}
		// The shop itself must accept the configuration.
		getenv := func(k string) string { return interpolate(env[k]) }
		if _, _, err := platform.LoadConfig("shop", nil, getenv, io.Discard); err != nil {
			t.Errorf("%s: the shop rejects its compose environment: %v", name, err)
		}
	}
}

func TestComposeNginx(t *testing.T) {
	c := loadCompose(t)
	ng := c.Services["nginx"]
	if !slices.ContainsFunc(ng.Ports, func(p string) bool { return strings.HasPrefix(strings.Trim(p, `"`), "8080:") }) {
		t.Errorf("nginx ports %q do not publish 8080", ng.Ports)
	}
	if !slices.ContainsFunc(ng.Volumes, func(v string) bool { return strings.HasPrefix(v, "./deploy/nginx.conf:") }) {
		t.Errorf("nginx volumes %q do not mount ./deploy/nginx.conf", ng.Volumes)
	}

	conf := readFile(t, "deploy/nginx.conf")
	upstream := regexp.MustCompile(`(?s)upstream\s+shop\s*\{(.*?)\}`).FindStringSubmatch(conf)
	if upstream == nil {
		t.Fatal("nginx.conf: no `upstream shop { ... }` block")
	}
	var servers []string
	for _, m := range regexp.MustCompile(`(?m)^\s*server\s+([a-z0-9_-]+):8080\b`).FindAllStringSubmatch(upstream[1], -1) {
		servers = append(servers, m[1])
	}
	slices.Sort(servers)
	if want := shops(c); !slices.Equal(servers, want) {
		t.Errorf("nginx upstream servers = %v, want the compose shops %v", servers, want)
	}
	for _, needle := range []string{"listen 8080", "proxy_pass http://shop", "X-Forwarded-For", "X-Real-IP", "location = /nginx-health"} {
		if !strings.Contains(conf, needle) {
			t.Errorf("nginx.conf lacks %q", needle)
		}
	}
}

func TestDockerfile(t *testing.T) {
	df := readFile(t, "Dockerfile")
	for _, needle := range []string{
		"FROM golang:1.26 AS build", "CGO_ENABLED=0", "-trimpath",
		"-X github.com/seckill-lab/shop/internal/app.Version=",
		"USER nonroot", "EXPOSE 8080", `ENTRYPOINT ["/shop"]`, `CMD ["serve"]`,
	} {
		if !strings.Contains(df, needle) {
			t.Errorf("Dockerfile lacks %q", needle)
		}
	}
}
