// Package otlprecv is a small OpenTelemetry trace receiver: it takes OTLP
// over HTTP (POST /v1/traces, protobuf, gzip or not), the wire format the
// shop exports, decodes it with the protocol's own generated types and
// keeps the spans in memory, to answer GET /api/traces/{trace_id} with
// them as JSON. Tests and CI's watch stage use it to check the spans the
// shop sent, where no trace backend (Jaeger, a Collector) is installed.
package otlprecv

import (
	"cmp"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Service  string            `json:"service"`
	TraceID  string            `json:"trace_id"`
	SpanID   string            `json:"span_id"`
	ParentID string            `json:"parent_id,omitempty"`
	Name     string            `json:"name"`
	Start    time.Time         `json:"start"`
	End      time.Time         `json:"end"`
	Attrs    map[string]string `json:"attributes,omitempty"`
	Links    []Link            `json:"links,omitempty"`
	Error    string            `json:"error,omitempty"` // the status message of a span that failed
}

// Link is a span's link to another span.
type Link struct {
	TraceID string `json:"trace_id"`
	SpanID  string `json:"span_id"`
}

// Receiver keeps the spans it received, at most MaxSpans (the oldest go).
type Receiver struct {
	MaxSpans int // 0: 1,000,000

	mu    sync.Mutex
	spans []Span
}

// ServeHTTP takes POST /v1/traces and answers GET /api/traces/{trace_id}.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch {
	case req.Method == http.MethodPost && req.URL.Path == "/v1/traces":
		r.receive(w, req)
	case req.Method == http.MethodGet && req.URL.Path == "/api/traces":
		r.summary(w)
	case req.Method == http.MethodGet && len(req.URL.Path) > len("/api/traces/"):
		spans := r.Trace(req.URL.Path[len("/api/traces/"):])
		if len(spans) == 0 {
			http.Error(w, "no such trace", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"spans": spans})
	default:
		http.NotFound(w, req)
	}
}

func (r *Receiver) receive(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = http.MaxBytesReader(w, req.Body, 64<<20)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, "not an OTLP ExportTraceServiceRequest (protobuf): "+err.Error(), http.StatusBadRequest)
		return
	}
	r.add(flatten(&msg))
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) add(spans []Span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, spans...)
	limit := r.MaxSpans
	if limit <= 0 {
		limit = 1_000_000
	}
	if over := len(r.spans) - limit; over > 0 {
		r.spans = slices.Delete(r.spans, 0, over)
	}
}

// Spans is every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Trace is the spans of one trace (its id in hex), in the order received.
func (r *Receiver) Trace(id string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// summary answers how many spans and traces it holds.
func (r *Receiver) summary(w http.ResponseWriter) {
	spans := r.Spans()
	traces := map[string]bool{}
	for _, s := range spans {
		traces[s.TraceID] = true
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"spans": len(spans), "traces": len(traces)})
}

func flatten(msg *collectortrace.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range msg.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: service, TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attrs: attrs(s.GetAttributes()),
				}
				if s.GetStatus().GetCode() == 2 { // STATUS_CODE_ERROR
					sp.Error = cmp.Or(s.GetStatus().GetMessage(), "error")
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
				}
				out = append(out, sp)
			}
		}
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}
