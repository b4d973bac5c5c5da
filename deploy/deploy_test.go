package deploy

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/seckill-lab/shop/internal/platform"
)

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// loadCompose loads docker-compose.yml with compose-go, the loader docker
// compose itself uses: schema validation, interpolation, merges (x-shop
// anchors), profiles and the top-level name, as `docker compose config`
// would see them. env is the environment it interpolates from (not the
// test's own, so the result does not depend on who runs it).
func loadCompose(t *testing.T, env map[string]string, profiles ...string) *types.Project {
	t.Helper()
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join("..", "docker-compose.yml")}, cli.WithWorkingDirectory(".."),
		cli.WithEnv(kv), cli.WithProfiles(profiles))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml does not load with compose-go: %v", err)
	}
	return p
}

// shops are the services that run `shop serve`.
func shops(p *types.Project) []string {
	var out []string
	for name, s := range p.Services {
		if s.Image == "seckill-lab/shop:local" && slices.Equal([]string(s.Command), []string{"serve"}) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func env(s types.ServiceConfig, key string) string {
	if v := s.Environment[key]; v != nil {
		return *v
	}
	return ""
}

func TestComposeLoads(t *testing.T) {
	p := loadCompose(t, nil)
	if p.Name != "seckill-shop" {
		t.Errorf("project name %q, want seckill-shop (top-level name:)", p.Name)
	}
	if _, err := p.GetService("redis-cluster"); err == nil {
		t.Error("redis-cluster runs without --profile cluster")
	}
	if got := p.Services["shop1"].DependsOn["migrate"].Condition; got != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("shop1 waits for migrate with %q, want service_completed_successfully", got)
	}
}

// TestComposeClusterProfile: --profile cluster adds a 3+3 Redis Cluster and
// the shops take SHOP_REDIS_URL from the environment, as the compose file's
// comment says.
func TestComposeClusterProfile(t *testing.T) {
	const list = "redis-cluster:7000,redis-cluster:7001,redis-cluster:7002"
	p := loadCompose(t, map[string]string{"SHOP_REDIS_URL": list}, "cluster")
	rc, err := p.GetService("redis-cluster")
	if err != nil {
		t.Fatalf("profile cluster: %v", err)
	}
	script := strings.Join(rc.Command, " ")
	for _, needle := range []string{"--cluster-enabled yes", "--cluster-announce-ip", "redis-cli --cluster create", "--cluster-replicas 1", "7005"} {
		if !strings.Contains(script, needle) {
			t.Errorf("redis-cluster command lacks %q", needle)
		}
	}
	if rc.HealthCheck == nil || !strings.Contains(strings.Join(rc.HealthCheck.Test, " "), "cluster_state:ok") {
		t.Error("redis-cluster: no healthcheck on cluster_state:ok")
	}
	for _, name := range shops(p) {
		s := p.Services[name]
		if got := env(s, "SHOP_REDIS_URL"); got != list {
			t.Errorf("%s: SHOP_REDIS_URL = %q with the cluster profile, want %q", name, got, list)
		}
		if _, _, err := platform.LoadConfig("shop", nil, func(k string) string { return env(s, k) }, io.Discard); err != nil {
			t.Errorf("%s: the shop rejects the cluster environment: %v", name, err)
		}
	}
}

func TestComposeServices(t *testing.T) {
	c := loadCompose(t, nil)
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
	if got := env(c.Services["mysql"], "MYSQL_DATABASE"); got != "shop" {
		t.Errorf("mysql MYSQL_DATABASE = %q, want shop", got)
	}
	if got := c.Services["migrate"].Command; !slices.Equal([]string(got), []string{"migrate"}) {
		t.Errorf("migrate command = %q, want [migrate]", got)
	}
	if got := shops(c); len(got) != 3 {
		t.Errorf("shop replicas = %v, want 3", got)
	}
}

func TestComposeHealthchecks(t *testing.T) {
	c := loadCompose(t, nil)
	want := map[string]string{"mysql": "mysqladmin ping", "redis": "redis-cli", "nginx": "/nginx-health"}
	for name, needle := range want {
		hc := c.Services[name].HealthCheck
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
	c := loadCompose(t, nil)
	names := append(shops(c), "migrate")
	first := c.Services[names[0]]
	for _, key := range []string{"SHOP_ADMIN_TOKEN", "SHOP_AUTH_SECRET"} {
		if env(first, key) == "" {
			t.Errorf("%s: %s unset: instances would generate different values", names[0], key)
		}
	}
	for _, name := range names {
		s := c.Services[name]
		for _, key := range []string{"SHOP_ADMIN_TOKEN", "SHOP_AUTH_SECRET"} {
			if env(s, key) != env(first, key) {
				t.Errorf("%s: %s = %q, %s has %q: every instance needs the same", name, key, env(s, key), names[0], env(first, key))
			}
		}
		if dsn := env(s, "SHOP_MYSQL_DSN"); !strings.Contains(dsn, "@tcp(mysql:3306)/shop?") || !strings.Contains(dsn, "parseTime=true") {
			t.Errorf("%s: SHOP_MYSQL_DSN = %q, want ...@tcp(mysql:3306)/shop?parseTime=true...", name, dsn)
		}
		if got := env(s, "SHOP_REDIS_URL"); got != "redis://redis:6379/0" {
			t.Errorf("%s: SHOP_REDIS_URL = %q", name, got)
		}
		// The shop itself must accept the configuration.
		getenv := func(k string) string { return env(s, k) }
		if _, _, err := platform.LoadConfig("shop", nil, getenv, io.Discard); err != nil {
			t.Errorf("%s: the shop rejects its compose environment: %v", name, err)
		}
	}
}

func TestComposeNginx(t *testing.T) {
	c := loadCompose(t, nil)
	ng := c.Services["nginx"]
	if !slices.ContainsFunc(ng.Ports, func(p types.ServicePortConfig) bool { return p.Published == "8080" && p.Target == 8080 }) {
		t.Errorf("nginx ports %v do not publish 8080", ng.Ports)
	}
	if !slices.ContainsFunc(ng.Volumes, func(v types.ServiceVolumeConfig) bool {
		return strings.HasSuffix(v.Source, "/deploy/nginx.conf") && v.Target == "/etc/nginx/nginx.conf"
	}) {
		t.Errorf("nginx volumes %v do not mount deploy/nginx.conf", ng.Volumes)
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
	for _, needle := range []string{"listen 8080", "proxy_pass http://shop", "X-Forwarded-For", "X-Real-IP", "location = /nginx-health",
		"hash $shop_affinity consistent", `"~^/api/v1/seckill/([0-9]+)/orders$" $1`} {
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
