// Package wire holds the JSON bodies of the shop's HTTP API, defined once:
// the server (httpapi) writes them, the load generator (loadgen) and the
// tests read them. docs/api.md is their reference. A change here changes
// the wire format for every side at once, so TestWireFormat pins the raw
// JSON independently of these types.
package wire

// TimeFormat is how every time is written: RFC 3339 in UTC with the
// microseconds the database keeps, so the same instant always renders to
// the same bytes.
const TimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// Product is a product as the API shows it.
type Product struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	PriceCents int64  `json:"price_cents"`
	Stock      int64  `json:"stock"`
	FlashSale  bool   `json:"flash_sale"`
	CreatedAt  string `json:"created_at"`
}

// Order is an order as the API shows it. PaidAt and CancelledAt are null
// until the order is paid or cancelled.
type Order struct {
	OrderNo     string  `json:"order_no"`
	UserID      int64   `json:"user_id"`
	ProductID   int64   `json:"product_id"`
	Quantity    int64   `json:"quantity"`
	AmountCents int64   `json:"amount_cents"`
	Status      string  `json:"status"`
	Kind        string  `json:"kind"`
	CreatedAt   string  `json:"created_at"`
	PaidAt      *string `json:"paid_at"`
	CancelledAt *string `json:"cancelled_at"`
	// Reason is why a queued order was rejected (status rejected only).
	Reason string `json:"reason,omitempty"`
}

// Wallet is a user's balance.
type Wallet struct {
	UserID       int64 `json:"user_id"`
	BalanceCents int64 `json:"balance_cents"`
}

// Page is one page of a list; NextCursor is null on the last page.
type Page[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// Login is the demo login's answer: a bearer token for UserID. (Fields in
// name order, as the body has always been written.)
type Login struct {
	ExpiresAt string `json:"expires_at"`
	Token     string `json:"token"`
	UserID    int64  `json:"user_id"`
}

// FormToken is a one-time order-form token.
type FormToken struct {
	ExpiresAt string `json:"expires_at"`
	Token     string `json:"token"`
}

// Problem is an RFC 9457 problem details body. Code is the stable
// machine-readable value clients switch on. OrderNo and ProductID are set
// by outcome_unknown only: the order the request may have placed (regular),
// or the product (seckill), which the retry or GET /orders/{no} resolves.
type Problem struct {
	Type      string            `json:"type"`
	Title     string            `json:"title"`
	Status    int               `json:"status"`
	Detail    string            `json:"detail,omitempty"`
	Code      string            `json:"code"`
	Instance  string            `json:"instance,omitempty"`
	Errors    map[string]string `json:"errors,omitempty"`
	OrderNo   string            `json:"order_no,omitempty"`
	ProductID int64             `json:"product_id,omitempty"`
	// TraceID is the request's trace, when it was traced and sampled:
	// the id to look it up by in the trace backend.
	TraceID string `json:"trace_id,omitempty"`
}
