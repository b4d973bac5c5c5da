package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// TestWireFormat pins each body to its raw JSON, written out by hand from
// docs/api.md: the server, the load generator and the tests all share these
// types, so only a test that does not trust them can see a changed name,
// a dropped field or a null that became absent.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	paid, next := "2026-01-02T03:04:05.000006Z", "c1"
	for _, tt := range []struct {
		name string
		v    any
		raw  string
	}{
		{"product", Product{ID: 7, Name: "Tea", PriceCents: 1999, Stock: 3, FlashSale: true, CreatedAt: "2026-01-02T03:04:05.000000Z"},
			`{"id":7,"name":"Tea","price_cents":1999,"stock":3,"flash_sale":true,"created_at":"2026-01-02T03:04:05.000000Z"}`},
		{"pending order", Order{OrderNo: "SABC", UserID: 42, ProductID: 7, Quantity: 1, AmountCents: 1999, Status: "pending", Kind: "seckill", CreatedAt: "2026-01-02T03:04:05.000000Z"},
			`{"order_no":"SABC","user_id":42,"product_id":7,"quantity":1,"amount_cents":1999,"status":"pending","kind":"seckill","created_at":"2026-01-02T03:04:05.000000Z","paid_at":null,"cancelled_at":null}`},
		{"paid order", Order{OrderNo: "RXYZ", UserID: 42, ProductID: 7, Quantity: 2, AmountCents: 3998, Status: "paid", Kind: "regular", CreatedAt: "2026-01-02T03:04:05.000000Z", PaidAt: &paid},
			`{"order_no":"RXYZ","user_id":42,"product_id":7,"quantity":2,"amount_cents":3998,"status":"paid","kind":"regular","created_at":"2026-01-02T03:04:05.000000Z","paid_at":"2026-01-02T03:04:05.000006Z","cancelled_at":null}`},
		{"wallet", Wallet{UserID: 42, BalanceCents: 500}, `{"user_id":42,"balance_cents":500}`},
		{"last page", Page[Wallet]{Items: []Wallet{}}, `{"items":[],"next_cursor":null}`},
		{"page", Page[Wallet]{Items: []Wallet{{UserID: 1, BalanceCents: 2}}, NextCursor: &next}, `{"items":[{"user_id":1,"balance_cents":2}],"next_cursor":"c1"}`},
		{"login", Login{ExpiresAt: "2026-01-02T03:04:05.000000Z", Token: "t", UserID: 42}, `{"expires_at":"2026-01-02T03:04:05.000000Z","token":"t","user_id":42}`},
		{"form token", FormToken{ExpiresAt: "2026-01-02T03:04:05.000000Z", Token: "t"}, `{"expires_at":"2026-01-02T03:04:05.000000Z","token":"t"}`},
		{"problem", Problem{Type: "urn:shop:problem:sold_out", Title: "Sold out", Status: 409, Code: "sold_out"},
			`{"type":"urn:shop:problem:sold_out","title":"Sold out","status":409,"code":"sold_out"}`},
		{"problem with fields", Problem{Type: "urn:shop:problem:invalid_request", Title: "Invalid request", Status: 400, Detail: "d", Code: "invalid_request", Instance: "/api/v1/orders", Errors: map[string]string{"quantity": "required"}},
			`{"type":"urn:shop:problem:invalid_request","title":"Invalid request","status":400,"detail":"d","code":"invalid_request","instance":"/api/v1/orders","errors":{"quantity":"required"}}`},
	} {
		got, err := json.Marshal(tt.v)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if string(got) != tt.raw {
			t.Errorf("%s written as\n %s\nwant\n %s", tt.name, got, tt.raw)
		}
		// And read back strictly: every field of the raw body has a home.
		back := reflect.New(reflect.TypeOf(tt.v))
		dec := json.NewDecoder(bytes.NewReader([]byte(tt.raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(back.Interface()); err != nil {
			t.Errorf("%s: reading %s: %v", tt.name, tt.raw, err)
		} else if !reflect.DeepEqual(back.Elem().Interface(), tt.v) {
			t.Errorf("%s: read back as %+v, want %+v", tt.name, back.Elem().Interface(), tt.v)
		}
	}
}
