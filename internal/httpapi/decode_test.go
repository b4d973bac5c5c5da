package httpapi

import (
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/order"
)

// decodeTestBody stands for a route's request body.
type decodeTestBody struct {
	ProductID int64  `json:"product_id"`
	Quantity  int    `json:"quantity"`
	Note      string `json:"note"`
}

func (b *decodeTestBody) validate() map[string]string {
	if b.Quantity < 1 || b.Quantity > 100 {
		return map[string]string{"quantity": "must be between 1 and 100"}
	}
	return nil
}

// decodeCtx is a gin context whose body readBody has already taken.
func decodeCtx(contentType, body string) *gin.Context {
	gin.SetMode(gin.ReleaseMode)
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest(http.MethodPost, "/api/v1/orders", strings.NewReader(body))
	if contentType != "" {
		c.Request.Header.Set("Content-Type", contentType)
	}
	c.Set(ctxBody, []byte(body))
	return c
}

func TestDecodeProblems(t *testing.T) {
	t.Parallel()
	const jsonCT = "application/json"
	tests := []struct {
		name, contentType, body string
		rule                    bodyRule
		code                    string
		field                   string // key expected in Problem.Errors
	}{
		{"malformed", jsonCT, `{"quantity": 1,`, bodyRequired, "invalid_json", ""},
		{"not json at all", jsonCT, `quantity=1`, bodyRequired, "invalid_json", ""},
		{"bad token", jsonCT, `{quantity: 1}`, bodyRequired, "invalid_json", ""},
		{"trailing garbage", jsonCT, `{"quantity": 1} x`, bodyRequired, "invalid_json", ""},
		{"two values", jsonCT, `{"quantity": 1}{"quantity": 2}`, bodyRequired, "invalid_json", ""},
		{"unknown field", jsonCT, `{"quantity": 1, "coupon": "FREE"}`, bodyRequired, "invalid_request", "coupon"},
		{"wrong type", jsonCT, `{"quantity": "two"}`, bodyRequired, "invalid_request", "quantity"},
		{"wrong type nested number", jsonCT, `{"product_id": 1.5, "quantity": 1}`, bodyRequired, "invalid_request", "product_id"},
		{"not an object", jsonCT, `[1, 2]`, bodyRequired, "invalid_request", "body"},
		{"out of range", jsonCT, `{"quantity": 0}`, bodyRequired, "invalid_request", "quantity"},
		{"wrong content type", "text/plain", `{"quantity": 1}`, bodyRequired, "invalid_request", "Content-Type"},
		{"form content type", "application/x-www-form-urlencoded", `{"quantity": 1}`, bodyRequired, "invalid_request", "Content-Type"},
		{"garbled content type", "application/json; =", `{"quantity": 1}`, bodyRequired, "invalid_request", "Content-Type"},
		{"empty body required", jsonCT, ``, bodyRequired, "invalid_request", "body"},
		{"blank body required", jsonCT, "  \n", bodyRequired, "invalid_request", "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v decodeTestBody
			err := decode(decodeCtx(tt.contentType, tt.body), &v, tt.rule)
			if err == nil {
				t.Fatalf("decode(%q) accepted", tt.body)
			}
			p := problemFor(err)
			if p.Code != tt.code || p.Status != http.StatusBadRequest {
				t.Fatalf("decode(%q) = %d %s (%s), want 400 %s", tt.body, p.Status, p.Code, p.Detail, tt.code)
			}
			if tt.field != "" {
				if _, ok := p.Errors[tt.field]; !ok {
					t.Errorf("errors = %v, want a message for %q", p.Errors, tt.field)
				}
			} else if len(p.Errors) != 0 {
				t.Errorf("errors = %v, want none for %s", p.Errors, tt.code)
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, contentType, body string
		want                    decodeTestBody
	}{
		{"plain", "application/json", `{"product_id": 7, "quantity": 2}`, decodeTestBody{ProductID: 7, Quantity: 2}},
		{"charset", "application/json; charset=utf-8", `{"quantity": 3, "note": "hi"}`, decodeTestBody{Quantity: 3, Note: "hi"}},
		{"+json", "application/merge-patch+json", `{"quantity": 4}`, decodeTestBody{Quantity: 4}},
		{"no content type", "", `{"quantity": 5}`, decodeTestBody{Quantity: 5}},
		{"whitespace around", "application/json", "\n {\"quantity\": 6} \n", decodeTestBody{Quantity: 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v decodeTestBody
			if err := decode(decodeCtx(tt.contentType, tt.body), &v, bodyRequired); err != nil {
				t.Fatalf("decode(%q): %v", tt.body, err)
			}
			if v != tt.want {
				t.Errorf("decoded %+v, want %+v", v, tt.want)
			}
		})
	}
}

func TestDecodeEmptyBodyWhenAllowed(t *testing.T) {
	t.Parallel()
	// Seckill orders take an empty body or {}; any field is invalid_request.
	var v struct{}
	for _, body := range []string{"", "{}", " { } "} {
		if err := decode(decodeCtx("", body), &v, bodyOptional); err != nil {
			t.Errorf("decode(%q) with bodyOptional: %v", body, err)
		}
	}
	err := decode(decodeCtx("application/json", `{"quantity": 2}`), &v, bodyOptional)
	if p := problemFor(err); p.Code != "invalid_request" || p.Errors["quantity"] == "" {
		t.Errorf("a field in a seckill body: %+v, want invalid_request naming quantity", p)
	}
}

// TestDecodeProblemIsWrittenAsProblemJSON checks the whole path a handler
// takes: decode fails, writeError answers 400 application/problem+json.
func TestDecodeProblemIsWrittenAsProblemJSON(t *testing.T) {
	t.Parallel()
	gin.SetMode(gin.ReleaseMode)
	w := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest(http.MethodPost, "/api/v1/orders", strings.NewReader(`{"quantity": "x"}`))
	c.Request.Header.Set("Content-Type", "application/json")
	c.Set(ctxBody, []byte(`{"quantity": "x"}`))
	var v decodeTestBody
	writeError(c, decode(c, &v, bodyRequired))
	if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %q, want 400 application/problem+json", w.Code, w.Header().Get("Content-Type"))
	}
	if b := w.Body.String(); !strings.Contains(b, `"code":"invalid_request"`) || !strings.Contains(b, `"errors":{"quantity":`) {
		t.Errorf("body %s", b)
	}
}

// TestDecodeStrictKeys: field names match exactly and no key repeats
// (encoding/json alone matches case-insensitively and keeps the last of two).
func TestDecodeStrictKeys(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body, field string }{
		{"case variant", `{"QUANTITY": 5}`, "QUANTITY"},
		{"case variant beside the real one", `{"quantity": 1, "QUANTITY": 5}`, "QUANTITY"},
		{"capitalised", `{"Quantity": 5}`, "Quantity"},
		{"duplicate", `{"quantity": 1, "quantity": 5}`, "quantity"},
		{"duplicate in a nested object", `{"quantity": 1, "note": {"a": 1, "a": 2}}`, "a"},
		{"exponent", `{"quantity": 1e3}`, "quantity"},
		{"beyond 64 bits", `{"product_id": 99999999999999999999, "quantity": 1}`, "product_id"},
		{"null body", `null`, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v decodeTestBody
			p := problemFor(decode(decodeCtx("application/json", tt.body), &v, bodyRequired))
			if p.Code != "invalid_request" || p.Errors[tt.field] == "" {
				t.Fatalf("decode(%s) = %s %v, want invalid_request naming %q", tt.body, p.Code, p.Errors, tt.field)
			}
			if strings.Contains(tt.name, "exponent") || strings.Contains(tt.name, "64 bits") {
				if msg := p.Errors[tt.field]; !strings.Contains(msg, "integer") {
					t.Errorf("message %q does not say an integer is wanted", msg)
				}
			}
		})
	}
	// A seckill body of null is not "empty or {}".
	var empty struct{}
	if p := problemFor(decode(decodeCtx("application/json", "null"), &empty, bodyOptional)); p.Code != "invalid_request" {
		t.Errorf("seckill body null: %s, want invalid_request", p.Code)
	}
}

func TestOrderNoPatternMatchesOrderNumbers(t *testing.T) {
	t.Parallel()
	for _, no := range []string{order.SeckillNo(1, 1), order.RegularNo(42, "key:k"), "SX" + rand.Text()} {
		if !orderNoPattern.MatchString(no) {
			t.Errorf("order number %q does not match %s", no, orderNoPattern)
		}
	}
	for _, no := range []string{"", "S", "s" + order.SeckillNo(1, 1)[1:], order.SeckillNo(1, 1) + "/x", strings.Repeat("A", 1000)} {
		if orderNoPattern.MatchString(no) {
			t.Errorf("%q matches the order number pattern", no)
		}
	}
}

// TestFormTokenPurposeComesFromTheRoute: the purpose a form token is
// consumed for is the route's, not a constant of the idempotency flow, so a
// second form-token route would not accept order tokens (issue 11 item 12).
func TestFormTokenPurposeComesFromTheRoute(t *testing.T) {
	t.Parallel()
	for _, purpose := range []string{orderFormPurpose, "review"} {
		c := decodeCtx("application/json", `{}`)
		c.Request.Header.Set("X-Form-Token", "tok")
		ir, err := readIdemHeaders(c, idemMode{required: true, formToken: purpose})
		if err != nil || ir.formToken != "tok" || ir.purpose != purpose {
			t.Errorf("route purpose %q: read %+v, %v", purpose, ir, err)
		}
	}
}
