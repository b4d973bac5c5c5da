package deploy

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-lab/shop/internal/platform"
)

// TestComposeWatchProfile: the watch profile runs Prometheus (exemplars
// stored), the Alertmanager prometheus.yml sends to, and Jaeger v2 taking
// OTLP/HTTP, and the shops export to it when told to (off otherwise).
func TestComposeWatchProfile(t *testing.T) {
	const endpoint = "http://jaeger:4318"
	p := loadCompose(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, "watch")
	for _, name := range []string{"prometheus", "alertmanager", "jaeger", "grafana"} {
		if _, err := p.GetService(name); err != nil {
			t.Fatalf("profile watch: %v", err)
		}
	}
	if cmd := p.Services["prometheus"].Command; !slices.Contains([]string(cmd), "--enable-feature=exemplar-storage") {
		t.Errorf("prometheus command %q: exemplar storage off, the dashboard's latency panels would have no trace to link", cmd)
	}
	if !strings.Contains(readFile(t, "deploy/prometheus/prometheus.yml"), `targets: ["alertmanager:9093"]`) {
		t.Error("prometheus.yml does not send its alerts to the alertmanager service (alerting: alertmanager:9093)")
	}
	jaeger := p.Services["jaeger"]
	if !strings.HasPrefix(jaeger.Image, "jaegertracing/jaeger:2.") {
		t.Errorf("jaeger image %q, want Jaeger v2 (jaegertracing/jaeger:2.x)", jaeger.Image)
	}
	published := map[uint32]bool{}
	for _, port := range jaeger.Ports {
		published[port.Target] = true
	}
	if !published[4318] || !published[16686] {
		t.Errorf("jaeger publishes %v, want OTLP/HTTP 4318 and the UI 16686", jaeger.Ports)
	}
	for _, name := range shops(p) {
		s := p.Services[name]
		if got := env(s, "OTEL_EXPORTER_OTLP_ENDPOINT"); got != endpoint {
			t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT = %q, want %q", name, got, endpoint)
		}
		if _, _, err := platform.LoadConfig("shop", nil, func(k string) string { return env(s, k) }, io.Discard); err != nil {
			t.Errorf("%s: the shop rejects the watch environment: %v", name, err)
		}
	}
	off := loadCompose(t, nil, "watch")
	for _, name := range shops(off) {
		if got := env(off.Services[name], "OTEL_EXPORTER_OTLP_ENDPOINT"); got != "" {
			t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT = %q by default, want empty (tracing off)", name, got)
		}
	}
}
