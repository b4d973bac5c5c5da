package httpapi

import (
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/order"
)

// timeFormat is RFC 3339 in UTC with the microseconds the database keeps,
// so the same instant always renders to the same bytes.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

func ts(t time.Time) string { return t.UTC().Format(timeFormat) }

func tsPtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := ts(*t)
	return &s
}

type productView struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	PriceCents int64  `json:"price_cents"`
	Stock      int64  `json:"stock"`
	CreatedAt  string `json:"created_at"`
}

func productOf(p inventory.Product) productView {
	return productView{ID: p.ID, Name: p.Name, PriceCents: p.PriceCents, Stock: p.Stock, CreatedAt: ts(p.CreatedAt)}
}

type orderView struct {
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
}

func orderOf(o order.Order) orderView {
	return orderView{OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID, Quantity: o.Quantity,
		AmountCents: o.AmountCents, Status: o.Status, Kind: o.Kind, CreatedAt: ts(o.CreatedAt),
		PaidAt: tsPtr(o.PaidAt), CancelledAt: tsPtr(o.CancelledAt)}
}

type page[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}
