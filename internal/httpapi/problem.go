package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/payment"
	"github.com/seckill-lab/shop/internal/wire"
)

// codeInfo is one row of docs/api.md's error-code table.
type codeInfo struct {
	status int
	title  string
}

// codes is the complete error-code table of docs/api.md.
var codes = map[string]codeInfo{
	"body_too_large":          {http.StatusRequestEntityTooLarge, "Request body too large"},
	"invalid_json":            {http.StatusBadRequest, "Malformed JSON"},
	"invalid_request":         {http.StatusBadRequest, "Invalid request"},
	"idempotency_key_missing": {http.StatusBadRequest, "Idempotency-Key missing or malformed"},
	"unauthenticated":         {http.StatusUnauthorized, "Authentication required"},
	"insufficient_funds":      {http.StatusPaymentRequired, "Insufficient funds"},
	"forbidden":               {http.StatusForbidden, "Forbidden"},
	"not_found":               {http.StatusNotFound, "Not found"},
	"method_not_allowed":      {http.StatusMethodNotAllowed, "Method not allowed"},
	"idempotency_key_in_use":  {http.StatusConflict, "Idempotency-Key in use"},
	"form_token_invalid":      {http.StatusConflict, "Form token invalid"},
	"sold_out":                {http.StatusConflict, "Sold out"},
	"insufficient_stock":      {http.StatusConflict, "Insufficient stock"},
	"already_paid":            {http.StatusConflict, "Order already paid"},
	"invalid_state":           {http.StatusConflict, "Invalid order state"},
	"idempotency_key_reused":  {http.StatusUnprocessableEntity, "Idempotency-Key reused with a different request"},
	"internal":                {http.StatusInternalServerError, "Internal server error"},
	"busy":                    {http.StatusServiceUnavailable, "System busy, retry later"},
	"unavailable":             {http.StatusServiceUnavailable, "Dependency unavailable, retry later"},
	"outcome_unknown":         {http.StatusServiceUnavailable, "Outcome unknown, retry to learn it"},
	"rate_limited":            {http.StatusTooManyRequests, "Too many requests"},
	"unpaid_limit":            {http.StatusConflict, "Too many unpaid units"},
	"not_ready":               {http.StatusServiceUnavailable, "Not ready"},
	"overloaded":              {http.StatusServiceUnavailable, "Overloaded, retry later"},
}

// apiError is an error that already knows its code; handlers return it for
// request-shape problems, domain errors are mapped by errorTable.
type apiError struct {
	code   string
	detail string
	fields map[string]string
}

func (e *apiError) Error() string { return e.code + ": " + e.detail }

func newError(code, detail string) *apiError { return &apiError{code: code, detail: detail} }

func invalid(fields map[string]string) *apiError {
	return &apiError{code: "invalid_request", detail: "the request has invalid fields", fields: fields}
}

// errorTable maps domain sentinel errors to codes and to the detail a person
// reads (the sentinels' own texts carry package prefixes such as "idem:");
// checked with errors.Is so wrapping never breaks it. The one place a domain
// error becomes HTTP.
var errorTable = []struct {
	err    error
	code   string
	detail string
}{
	{idem.ErrInUse, "idempotency_key_in_use", "a request with this Idempotency-Key is still being processed; wait for its answer, then retry with the same key"},
	{idem.ErrFingerprintMismatch, "idempotency_key_reused", "this Idempotency-Key was already used for a different request; send a new key for a new request"},
	{idem.ErrTokenInvalid, "form_token_invalid", "the form token was already used, has expired or is not yours; get a new one (POST /api/v1/form-tokens), and look up your orders if you are retrying"},
	{idem.ErrKeyMissing, "idempotency_key_missing", "this request needs an Idempotency-Key header (1-255 characters of A-Z a-z 0-9 - _ . :)"},
	{idem.ErrKeyMalformed, "idempotency_key_missing", "the Idempotency-Key header is malformed: use 1-255 characters of A-Z a-z 0-9 - _ . :"},
	{inventory.ErrNotFound, "not_found", "product not found"},
	{order.ErrNotFound, "not_found", "order not found"},
	{inventory.ErrSoldOut, "sold_out", "sold out"},
	{inventory.ErrInsufficientStock, "insufficient_stock", "not enough stock"},
	{inventory.ErrBusy, "busy", "system busy, retry later"},
	{lockx.ErrNotObtained, "busy", "system busy, retry later"},
	{lockx.ErrNotReplicated, "unavailable", "Redis did not confirm the lock on enough replicas; nothing was changed, retry later"},
	{order.ErrInvalidState, "invalid_state", "the order is not in a state that allows this (it may be paid or cancelled already)"},
	{audit.ErrNotFound, "not_found", "product not found"},
	{payment.ErrInsufficientFunds, "insufficient_funds", "the wallet balance is less than the order amount; an operator must credit the wallet first"},
	{payment.ErrAlreadyPaid, "already_paid", "this order is already paid; nothing was charged"},
	{payment.ErrBusy, "busy", "account busy, retry later"},
	{order.ErrNotAccepted, "unavailable", "the queue did not confirm the order in time; nothing was promised, retry later"},
	{order.ErrUnpaidLimit, "unpaid_limit", "too many unpaid units are held; pay or cancel pending orders first"},
	{order.ErrOutcomeUnknown, "outcome_unknown", "the database did not tell in time whether the order was placed: it may exist or not; retry the same request (same Idempotency-Key, or for a seckill the same product) to learn it: the retry answers the order if it exists or places it once, never twice"},
}

// retryAfter is the Retry-After of each 503: busy is a contended lock (one
// second is enough), unavailable a dependency that is down or restarting,
// outcome_unknown a database that did not answer in time (a failover),
// overloaded an instance at its connection cap (see capListener).
var retryAfter = map[string]string{"busy": "1", "unavailable": "2", "outcome_unknown": "2", "overloaded": "1"}

// unavailable reports whether err is a dependency that cannot answer: a
// Redis or database connection refused, reset, closed or timed out, a pool
// with no free connection, a Redis still loading, read-only after a
// failover, or without a master, or a database that is read-only, outside
// its cluster's primary component or shutting down (dbx.Unavailable). Such a request changed nothing (or its
// transaction rolled back), so the client may retry it: 503, never 500.
func unavailable(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		// A Redis restarting, failing over or with a cluster slot down.
		redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsMasterDownError(err),
		redis.IsClusterDownError(err), redis.IsTryAgainError(err), redis.IsNoReplicasError(err),
		errors.Is(err, lockx.ErrClosed),
		dbx.Unavailable(err),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	// A cluster slot still moving after the client's redirects ran out.
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask
}

// problemFor decides the problem for err: an apiError, a mapped domain error,
// or 500 internal.
func problemFor(err error) wire.Problem {
	code, detail := "internal", "an unexpected error occurred"
	var fields map[string]string
	var ae *apiError
	if errors.As(err, &ae) {
		code, detail, fields = ae.code, ae.detail, ae.fields
	} else {
		for _, row := range errorTable {
			if errors.Is(err, row.err) {
				code, detail = row.code, row.detail
				break
			}
		}
		if code == "internal" && unavailable(err) {
			code, detail = "unavailable", "a dependency (database or Redis) did not answer; nothing was changed, retry later"
		}
	}
	info := codes[code]
	p := wire.Problem{Type: "urn:shop:problem:" + code, Title: info.title, Status: info.status, Detail: detail, Code: code, Errors: fields}
	var in *inDoubt
	if code == "outcome_unknown" && errors.As(err, &in) {
		p.OrderNo, p.ProductID = in.orderNo, in.productID
	}
	return p
}

// problemOf is problemFor in a request: its path is the instance, and an
// error that only says the client went away (its context was cancelled)
// is not a failure of ours.
func problemOf(c *gin.Context, err error) wire.Problem {
	p := problemFor(err)
	if p.Code == "internal" && errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil {
		p = problemFor(newError("unavailable", "the request was cancelled before it finished"))
	}
	p.Instance = c.Request.URL.Path
	p.TraceID = traceID(c.Request.Context())
	return p
}

// writeError is the only way handlers answer with an error.
func writeError(c *gin.Context, err error) { problemResponse(c, err).write(c) }

// problemResponse renders err as the problem+json answer writeError sends
// (and an idempotency record keeps), logging what deserves it.
func problemResponse(c *gin.Context, err error) response {
	p := problemOf(c, err)
	logFailure(c, p, err)
	if p.Code == "outcome_unknown" {
		return response{status: p.Status, header: problemHeader(p.Code), body: mustJSON(p), inDoubt: p.OrderNo}
	}
	if p.Code == "sold_out" {
		// The answer most buyers of a sale get: the access log keeps it
		// at debug, or it would bury everything else.
		c.Set(ctxQuiet, true)
		return response{status: p.Status, header: problemHeader(p.Code), body: soldOutBodies.of(p)}
	}
	return response{status: p.Status, header: problemHeader(p.Code), body: mustJSON(p)}
}

// problemHeader is code's headers (problemHeaders), or the media type
// alone for a code the table lacks.
func problemHeader(code string) map[string]string {
	if h, ok := problemHeaders[code]; ok {
		return h
	}
	return map[string]string{"Content-Type": "application/problem+json"}
}

// problemHeaders are each problem code's headers, made once: the media
// type and, for a code that has one, Retry-After. Read-only (asReplay
// copies before it adds a header).
var problemHeaders = func() map[string]map[string]string {
	out := make(map[string]map[string]string, len(codes))
	for code := range codes {
		h := map[string]string{"Content-Type": "application/problem+json"}
		if ra := retryAfter[code]; ra != "" {
			h["Retry-After"] = ra
		}
		out[code] = h
	}
	return out
}()

// soldOutBodies keeps the sold_out problem's bytes per path: the answer
// most buyers of a sale get, the same for all of them on one product's
// path (its detail is fixed; the path is its instance), so it is encoded
// once per path, not once per refusal.
var soldOutBodies = &bodyMemo{}

// bodyMemo remembers encoded problems of one code by detail and instance,
// up to maxMemoBodies of them (past that, encoded each time: a sold-out
// path names a product that exists, but the bound does not rely on it). A
// problem with field errors is never kept.
type bodyMemo struct {
	m sync.Map // memoKey -> []byte
	n atomic.Int64
}

type memoKey struct{ detail, instance string }

const maxMemoBodies = 4096

func (b *bodyMemo) of(p wire.Problem) []byte {
	if p.Errors != nil || p.TraceID != "" {
		return mustJSON(p)
	}
	k := memoKey{p.Detail, p.Instance}
	if v, ok := b.m.Load(k); ok {
		return v.([]byte)
	}
	body := mustJSON(p)
	if b.n.Load() < maxMemoBodies {
		if v, loaded := b.m.LoadOrStore(k, body); loaded {
			return v.([]byte)
		}
		b.n.Add(1)
	}
	return body
}

// logFailure logs a 5xx: an unexpected error at ERROR, a dependency that did
// not answer at WARN; busy and not_ready are expected answers, not logged.
func logFailure(c *gin.Context, p wire.Problem, err error) {
	switch p.Code {
	case "internal":
		logger(c).Error("request failed", "err", err)
	case "unavailable":
		if errors.Is(c.Request.Context().Err(), context.Canceled) {
			logger(c).Info("request ended before it finished (client gone or request timeout)", "err", err)
			return
		}
		logger(c).Warn("dependency unavailable", "err", err)
	case "outcome_unknown":
		logger(c).Warn("commit outcome unknown: answered 503 outcome_unknown", "err", err)
	}
}

// mustJSON encodes the API's own view types, which cannot fail to encode.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		slog.Error("marshal response", "err", err)
		return []byte("{}")
	}
	return b
}
