package httpapi

import (
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/wire"
)

func ts(t time.Time) string { return t.UTC().Format(wire.TimeFormat) }

func tsPtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := ts(*t)
	return &s
}

func productOf(p inventory.Product) wire.Product {
	return wire.Product{ID: p.ID, Name: p.Name, PriceCents: p.PriceCents, Stock: p.Stock, FlashSale: p.FlashSale, CreatedAt: ts(p.CreatedAt)}
}

func orderOf(o order.Order) wire.Order {
	return wire.Order{OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID, Quantity: o.Quantity,
		AmountCents: o.AmountCents, Status: o.Status, Kind: o.Kind, CreatedAt: ts(o.CreatedAt),
		PaidAt: tsPtr(o.PaidAt), CancelledAt: tsPtr(o.CancelledAt)}
}
