package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
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
// wrapping never breaks it. Filled by the route files of each domain.
var errorTable []struct {
	err  error
	code string
}

func mapError(err error, code string) {
	errorTable = append(errorTable, struct {
		err  error
		code string
	}{err, code})
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
	b, err := json.Marshal(p)
	if err != nil {
		slog.Error("marshal problem", "err", err)
	}
	c.Header("Content-Type", "application/problem+json")
	c.Header("Content-Length", strconv.Itoa(len(b)))
	c.Status(p.Status)
	_, _ = c.Writer.Write(b)
	c.Abort()
}
