package platform

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/XSAM/otelsql"
	"github.com/glebarez/sqlite"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// Tracing is the shop's OpenTelemetry tracing, on when
// OTEL_EXPORTER_OTLP_ENDPOINT names a collector: spans go there over OTLP
// (HTTP/protobuf), sampled by OTEL_TRACES_SAMPLER. Off (nil), nothing is
// instrumented and nothing is traced: no cost.
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// OpenTracing starts tracing as c asks; nil when it is off.
func OpenTracing(ctx context.Context, c Config, version string) (*Tracing, error) {
	if c.OTLPEndpoint == "" {
		return nil, nil
	}
	sampler, err := samplerOf(c.TraceSampler, c.TraceSamplerArg)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(strings.TrimSuffix(c.OTLPEndpoint, "/")+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("config: OTEL_EXPORTER_OTLP_ENDPOINT: %w", err)
	}
	return NewTracing(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sampler), sdktrace.WithResource(resource.NewSchemaless(
		attribute.String("service.name", c.ServiceName), attribute.String("service.version", version)))), nil
}

// NewTracing is tracing with a provider built from opts (tests give it an
// in-memory recorder): W3C trace context and baggage propagated.
func NewTracing(opts ...sdktrace.TracerProviderOption) *Tracing {
	tp := sdktrace.NewTracerProvider(opts...)
	return &Tracing{Provider: tp, shutdown: tp.Shutdown,
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
}

// Shutdown sends the spans still buffered; safe on nil.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// InstrumentRedis traces the commands of r. Like the database's
// statements (dialector), a command is traced as a child of the span of its
// context only: a call outside a traced request (a lock's watchdog, the
// sweeper) starts no trace of its own. Safe on nil (tracing off: nothing is
// hooked).
func (t *Tracing) InstrumentRedis(r *Redis) error {
	if t == nil {
		return nil
	}
	if err := redisotel.InstrumentTracing(r.UniversalClient, redisotel.WithTracerProvider(childOnly{tp: t.Provider})); err != nil {
		return fmt.Errorf("tracing: redis: %w", err)
	}
	return nil
}

// dialector is gorm's dialector of dsn (dialect DialectMySQL or
// DialectSQLite): with tracing on, on a database/sql driver wrapped by
// otelsql, so every statement, BEGIN and COMMIT is a span (its text
// without the values).
func (t *Tracing) dialector(dialect, dsn string) (gorm.Dialector, error) {
	if t == nil {
		if dialect == DialectMySQL {
			return mysql.Open(dsn), nil
		}
		return sqlite.Open(dsn), nil
	}
	driver := map[string]string{DialectMySQL: "mysql", DialectSQLite: sqlite.DriverName}[dialect]
	conn, err := otelsql.Open(driver, dsn, otelsql.WithTracerProvider(childOnly{tp: t.Provider}),
		otelsql.WithAttributes(attribute.String("db.system.name", map[string]string{DialectMySQL: "mariadb", DialectSQLite: "sqlite"}[dialect])),
		otelsql.WithSpanOptions(otelsql.SpanOptions{OmitConnResetSession: true, OmitRows: true, OmitConnPrepare: true, DisableErrSkip: true}))
	if err != nil {
		return nil, fmt.Errorf("tracing: database: %w", err)
	}
	if dialect == DialectMySQL {
		return mysql.New(mysql.Config{DSN: dsn, Conn: conn}), nil
	}
	return &sqlite.Dialector{DriverName: driver, DSN: dsn, Conn: conn}, nil
}

// samplerOf reads OTEL_TRACES_SAMPLER and its argument as the
// OpenTelemetry specification defines them.
func samplerOf(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("config: OTEL_TRACES_SAMPLER_ARG: not a ratio between 0 and 1: %q", arg)
		}
		ratio = r
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, fmt.Errorf("config: OTEL_TRACES_SAMPLER: must be always_on, always_off, traceidratio or parentbased_ one of them, got %q", name)
}

// childOnly is a TracerProvider whose spans start only under a recording
// parent; elsewhere Start hands back the parent it found, which records
// nothing.
type childOnly struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (c childOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childTracer{t: c.tp.Tracer(name, opts...)}
}

type childTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (c childTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if parent := trace.SpanFromContext(ctx); !parent.IsRecording() {
		return ctx, parent
	}
	return c.t.Start(ctx, name, opts...)
}
