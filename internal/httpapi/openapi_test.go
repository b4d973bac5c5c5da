package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// The OpenAPI document is checked here with the standard library: it must
// list exactly the router's API routes, resolve every $ref, and carry the
// complete error-code table. openapi_kin_test.go adds the full OpenAPI 3
// validation with kin-openapi.

// oaDoc is the part of an OpenAPI document these checks read.
type oaDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas         map[string]json.RawMessage `json:"schemas"`
		SecuritySchemes map[string]json.RawMessage `json:"securitySchemes"`
	} `json:"components"`
}

type oaOperation struct {
	OperationID string                     `json:"operationId"`
	Security    *[]map[string][]string     `json:"security"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func loadDoc(t *testing.T) oaDoc {
	t.Helper()
	var d oaDoc
	if err := json.Unmarshal(openapiJSON, &d); err != nil {
		t.Fatalf("openapi.json is not valid JSON: %v", err)
	}
	return d
}

// isAPIPath says whether a router path belongs to the API the document must
// describe (the demo page and static assets do not).
func isAPIPath(p string) bool {
	switch p {
	case "/healthz", "/readyz", "/metrics", "/openapi.json":
		return true
	}
	return strings.HasPrefix(p, "/api/")
}

var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

// routerRoutes are the router's API routes as "METHOD /path/{param}".
func routerRoutes(t *testing.T) []string {
	t.Helper()
	h := New(Deps{Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), LabRoutes: true})
	eng, ok := h.(*gin.Engine)
	if !ok {
		t.Fatalf("New returned %T, want *gin.Engine", h)
	}
	var out []string
	for _, r := range eng.Routes() {
		if !isAPIPath(r.Path) {
			continue
		}
		out = append(out, r.Method+" "+ginParam.ReplaceAllString(r.Path, "{$1}"))
	}
	sort.Strings(out)
	return out
}

func docRoutes(d oaDoc) []string {
	var out []string
	for p, item := range d.Paths {
		for m := range item {
			if slices.Contains(httpMethods, m) {
				out = append(out, strings.ToUpper(m)+" "+p)
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestOpenAPIListsExactlyTheRoutes(t *testing.T) {
	t.Parallel()
	router, doc := routerRoutes(t), docRoutes(loadDoc(t))
	if len(router) == 0 {
		t.Fatal("the router has no routes")
	}
	for _, r := range router {
		if !slices.Contains(doc, r) {
			t.Errorf("route %s is served but missing from openapi.json", r)
		}
	}
	for _, r := range doc {
		if !slices.Contains(router, r) {
			t.Errorf("openapi.json documents %s but the router does not serve it", r)
		}
	}
}

func TestOpenAPIDocumentIsConsistent(t *testing.T) {
	t.Parallel()
	d := loadDoc(t)
	if d.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3", d.OpenAPI)
	}
	for _, s := range []string{"userBearer", "adminBearer"} {
		if _, ok := d.Components.SecuritySchemes[s]; !ok {
			t.Errorf("security scheme %s missing", s)
		}
	}

	// Every $ref resolves.
	var all any
	if err := json.Unmarshal(openapiJSON, &all); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				if resolve(all, r) == nil {
					t.Errorf("$ref %q does not resolve", r)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(all)

	// Problem.code is exactly the code table of problem.go (docs/api.md's list).
	var problem struct {
		Properties struct {
			Code struct {
				Enum []string `json:"enum"`
			} `json:"code"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(d.Components.Schemas["Problem"], &problem); err != nil {
		t.Fatal(err)
	}
	var want []string
	for c := range codes {
		want = append(want, c)
	}
	got := slices.Clone(problem.Properties.Code.Enum)
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("Problem.code enum = %v, want the code table %v", got, want)
	}

	// Operations: unique ids, the right security, responses that exist, and
	// problem examples whose code belongs to the status they are listed under.
	ids := map[string]string{}
	for p, item := range d.Paths {
		for m, raw := range item {
			if !slices.Contains(httpMethods, m) {
				continue
			}
			name := strings.ToUpper(m) + " " + p
			var op oaOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", name)
			} else if prev, dup := ids[op.OperationID]; dup {
				t.Errorf("%s: operationId %s also used by %s", name, op.OperationID, prev)
			}
			ids[op.OperationID] = name
			if op.Security == nil {
				t.Errorf("%s: security not stated (use [] for public routes)", name)
			} else {
				var schemes []string
				for _, req := range *op.Security {
					for s := range req {
						schemes = append(schemes, s)
					}
				}
				wantScheme := wantSecurity(p, m)
				if !slices.Equal(schemes, wantScheme) {
					t.Errorf("%s: security %v, want %v", name, schemes, wantScheme)
				}
				if len(wantScheme) > 0 {
					for _, st := range []string{"401", "403"} {
						if _, ok := op.Responses[st]; !ok {
							t.Errorf("%s: protected route does not document %s", name, st)
						}
					}
				}
			}
			if len(op.Responses) == 0 {
				t.Errorf("%s: no responses", name)
			}
			for st, resp := range op.Responses {
				checkProblemExamples(t, name, st, resolveRaw(all, resp))
			}
		}
	}
}

// wantSecurity is docs/api.md's rule: public routes, admin routes, user routes.
func wantSecurity(path, method string) []string {
	switch {
	case !strings.HasPrefix(path, "/api/"), path == "/api/v1/auth/token",
		method == "get" && strings.HasPrefix(path, "/api/v1/products"):
		return nil
	case strings.HasPrefix(path, "/api/v1/admin/"):
		return []string{"adminBearer"}
	default:
		return []string{"userBearer"}
	}
}

func checkProblemExamples(t *testing.T, op, status string, resp map[string]any) {
	t.Helper()
	content, _ := resp["content"].(map[string]any)
	pj, ok := content["application/problem+json"].(map[string]any)
	if !ok {
		if n, _ := strconv.Atoi(status); n >= 400 {
			t.Errorf("%s %s: an error response must be application/problem+json", op, status)
		}
		return
	}
	examples, _ := pj["examples"].(map[string]any)
	if len(examples) == 0 {
		t.Errorf("%s %s: no problem examples naming the codes", op, status)
	}
	for code := range examples {
		info, known := codes[code]
		if !known {
			t.Errorf("%s %s: example code %q is not in the code table", op, status, code)
		} else if strconv.Itoa(info.status) != status {
			t.Errorf("%s %s: code %s is a %d", op, status, code, info.status)
		}
	}
}

func resolve(root any, ref string) any {
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	cur := root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

func resolveRaw(root any, raw json.RawMessage) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if r, ok := m["$ref"].(string); ok {
		m, _ = resolve(root, r).(map[string]any)
	}
	return m
}

func TestOpenAPIServedAsIs(t *testing.T) {
	t.Parallel()
	h := New(Deps{Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("GET /openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if !bytes.Equal(rec.Body.Bytes(), openapiJSON) {
		t.Error("GET /openapi.json does not serve the embedded document")
	}
}
