package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/payment"
)

// Problem is an RFC 9457 problem details body. Code is the stable
// machine-readable value clients switch on.
type Problem struct {
	Type     string            `json:"type"`
	Title    string            `json:"title"`
	Status   int               `json:"status"`
	Detail   string            `json:"detail,omitempty"`
	Code     string            `json:"code"`
	Instance string            `json:"instance,omitempty"`
	Errors   map[string]string `json:"errors,omitempty"`
}

// codeInfo is one row of API.md's error-code table.
type codeInfo struct {
	status int
	title  string
}

// codes is the complete error-code table of API.md.
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
	"not_ready":               {http.StatusServiceUnavailable, "Not ready"},
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

// errorTable maps domain sentinel errors to codes; checked with errors.Is so
// wrapping never breaks it. The one place a domain error becomes HTTP.
var errorTable = []struct {
	err  error
	code string
}{
	{idem.ErrInUse, "idempotency_key_in_use"},
	{idem.ErrFingerprintMismatch, "idempotency_key_reused"},
	{order.ErrRequestMismatch, "idempotency_key_reused"},
	{inventory.ErrRequestMismatch, "idempotency_key_reused"},
	{idem.ErrTokenInvalid, "form_token_invalid"},
	{idem.ErrKeyMissing, "idempotency_key_missing"},
	{idem.ErrKeyMalformed, "idempotency_key_missing"},
	{inventory.ErrNotFound, "not_found"},
	{order.ErrNotFound, "not_found"},
	{inventory.ErrSoldOut, "sold_out"},
	{inventory.ErrInsufficientStock, "insufficient_stock"},
	{inventory.ErrBusy, "busy"},
	{lockx.ErrNotObtained, "busy"},
	{order.ErrInvalidState, "invalid_state"},
	{audit.ErrNotFound, "not_found"},
	{payment.ErrInsufficientFunds, "insufficient_funds"},
	{payment.ErrAlreadyPaid, "already_paid"},
	{payment.ErrBusy, "busy"},
	{payment.ErrRequestMismatch, "idempotency_key_reused"},
}

// problemFor decides the problem for err: an apiError, a mapped domain error,
// or 500 internal.
func problemFor(err error) Problem {
	code, detail := "internal", "an unexpected error occurred"
	var fields map[string]string
	var ae *apiError
	if errors.As(err, &ae) {
		code, detail, fields = ae.code, ae.detail, ae.fields
	} else {
		for _, row := range errorTable {
			if errors.Is(err, row.err) {
				code, detail = row.code, err.Error()
				break
			}
		}
	}
	info := codes[code]
	return Problem{Type: "urn:shop:problem:" + code, Title: info.title, Status: info.status, Detail: detail, Code: code, Errors: fields}
}

// writeError is the only way handlers answer with an error.
func writeError(c *gin.Context, err error) {
	p := problemFor(err)
	p.Instance = c.Request.URL.Path
	if p.Status >= 500 && p.Code != "busy" && p.Code != "not_ready" {
		logger(c).Error("request failed", "err", err)
	}
	if p.Code == "busy" {
		c.Header("Retry-After", "1")
	}
	writeProblem(c, p)
}

func writeProblem(c *gin.Context, p Problem) {
	b := mustJSON(p)
	c.Header("Content-Type", "application/problem+json")
	c.Header("Content-Length", strconv.Itoa(len(b)))
	c.Status(p.Status)
	_, _ = c.Writer.Write(b)
	c.Abort()
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
