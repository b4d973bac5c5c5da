package order_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/seckill-lab/shop/internal/inventory"
)

// TestMarkerOutlivesItsOrder is a buyer after a lossy database failover
// (asynchronous replication promoted a replica that never had their order):
// Redis still holds their processed marker, naming an order number the
// database does not have. The marker is a shortcut, not the record, so the
// repeat is never answered with that phantom order: it is placed again
// under the lock when stock is left (201, the same order number), and
// refused sold_out when none is.
func TestMarkerOutlivesItsOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.shop(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		stockLeft int64 // the product's stock after the database forgot the order
		want      error
	}{
		{"stock left", 3, nil},
		{"sold out", 0, inventory.ErrSoldOut},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := f.product(t, a, 4)
			const user = 7
			first, created, err := a.orders.Seckill(ctx, user, id)
			if err != nil || !created {
				t.Fatalf("first seckill: created %v, %v", created, err)
			}
			a.orders.Wait() // the marker is written after the batch's answer
			key := f.Prefix + "done:seckill:" + strconv.Itoa(user) + ":" + strconv.FormatInt(id, 10)
			if v, err := f.RDB.Get(ctx, key).Result(); err != nil || v != first.OrderNo {
				t.Fatalf("marker %s = %q, %v; want %s", key, v, err, first.OrderNo)
			}
			// The database forgets the order and its ledger row.
			for _, q := range []string{"DELETE FROM orders WHERE order_no = ?", "DELETE FROM stock_ledger WHERE order_no = ?"} {
				if err := f.DB.Exec(q, first.OrderNo).Error; err != nil {
					t.Fatal(err)
				}
			}
			if err := f.DB.Exec("UPDATE products SET stock = ? WHERE id = ?", tt.stockLeft, id).Error; err != nil {
				t.Fatal(err)
			}

			b := f.shop(t) // another instance: nothing of the first in memory
			o, created, err := b.orders.Seckill(ctx, user, id)
			rows := f.Count(t, "SELECT COUNT(*) FROM orders WHERE order_no = ?", first.OrderNo)
			switch {
			case tt.want != nil:
				if !errors.Is(err, tt.want) || rows != 0 {
					t.Errorf("repeat: %+v, created %v, %v; %d rows; want %v and no order", o, created, err, rows, tt.want)
				}
			case err != nil || !created || o.OrderNo != first.OrderNo || rows != 1:
				t.Errorf("repeat: %+v, created %v, %v; %d rows; want the order placed again (201) under %s", o, created, err, rows, first.OrderNo)
			}
		})
	}
}
