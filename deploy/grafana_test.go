package deploy

import (
	"encoding/json"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDashboardLinksTraces: the latency panels of the Grafana dashboard
// ask for exemplars of the raw histograms, and the Prometheus data source
// sends an exemplar's trace_id (the label the shop writes) to a provisioned
// trace data source.
func TestDashboardLinksTraces(t *testing.T) {
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr     string `json:"expr"`
				Exemplar bool   `json:"exemplar"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, "deploy/grafana/dashboards/shop-flash-sale.json")), &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	linked := map[string]bool{}
	for _, p := range dash.Panels {
		if !strings.Contains(p.Title, "latency") && !strings.Contains(p.Title, "lock wait") || strings.HasPrefix(p.Title, "k6") {
			continue
		}
		panelLinks := false
		for _, q := range p.Targets {
			for _, h := range []string{"shop_http_request_duration_seconds_bucket", "shop_lock_wait_duration_seconds_bucket"} {
				if q.Exemplar && strings.Contains(q.Expr, h) {
					linked[h], panelLinks = true, true
				}
			}
		}
		if !panelLinks {
			t.Errorf("latency panel %q has no exemplar query over a raw histogram: no link to a trace", p.Title)
		}
	}
	if len(linked) != 2 {
		t.Errorf("exemplars shown for %v, want the request and lock-wait histograms (the two the shop gives exemplars)", linked)
	}

	var prov struct {
		Datasources []struct {
			UID      string `yaml:"uid"`
			Type     string `yaml:"type"`
			JSONData struct {
				Destinations []struct {
					Name string `yaml:"name"`
					UID  string `yaml:"datasourceUid"`
				} `yaml:"exemplarTraceIdDestinations"`
			} `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "deploy/grafana/provisioning/datasources/prometheus.yml")), &prov); err != nil {
		t.Fatalf("the data sources are not YAML: %v", err)
	}
	types := map[string]string{}
	for _, d := range prov.Datasources {
		types[d.UID] = d.Type
	}
	found := false
	for _, d := range prov.Datasources {
		for _, dest := range d.JSONData.Destinations {
			if d.Type == "prometheus" && dest.Name == "trace_id" && (types[dest.UID] == "jaeger" || types[dest.UID] == "tempo") {
				found = true
			}
		}
	}
	if !found {
		t.Error("no Prometheus data source sends exemplar label trace_id to a provisioned Jaeger (or Tempo) data source")
	}
	if !strings.Contains(readFile(t, "internal/httpapi/tracing.go"), `prometheus.Labels{"trace_id": id}`) {
		t.Error("the shop's exemplar label is no longer trace_id: update exemplarTraceIdDestinations")
	}
}
