package httpapi

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

func TestOpenAPIValidates(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapiJSON)
	if err != nil {
		t.Fatalf("load openapi.json: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI 3 document: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}

	// kin-openapi's own router finds every API route of the gin router.
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	eng := New(Deps{Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), LabRoutes: true}).(*gin.Engine)
	for _, r := range eng.Routes() {
		if !isAPIPath(r.Path) {
			continue
		}
		concrete := ginParam.ReplaceAllStringFunc(r.Path, func(s string) string {
			if strings.HasSuffix(s, "order_no") {
				return "SABC"
			}
			return "7"
		})
		req := httptest.NewRequest(r.Method, concrete, nil)
		route, _, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("%s %s (%s): not found in openapi.json: %v", r.Method, r.Path, concrete, err)
			continue
		}
		if route.Operation == nil || route.Operation.Responses.Len() == 0 {
			t.Errorf("%s %s: no responses documented", r.Method, r.Path)
		}
	}
}
