package order_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/ride"
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

// TestSeckillReadsTheMarkerItsRideBrought: the processed-marker read that
// rode on another round trip (the rate limiter's, in the shop) is the one
// PlaceSeckill answers from: here the marker names the buyer's other order,
// and is deleted from Redis after the ride brought it, so an answer from a
// read of its own (or from the batch) would be the seckill order instead.
// Without a ride taken, PlaceSeckill reads the marker itself.
func TestSeckillReadsTheMarkerItsRideBrought(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.shop(t)
	ctx := context.Background()
	id := f.product(t, a, 5)
	const user = 21
	first, created, err := a.orders.Seckill(ctx, user, id)
	if err != nil || !created {
		t.Fatalf("first seckill: created %v, %v", created, err)
	}
	other, created, err := a.orders.Regular(ctx, user, id, 1, "ride-key", "ride-hash")
	if err != nil || !created {
		t.Fatalf("regular order: created %v, %v", created, err)
	}
	a.orders.Wait()
	key := f.Prefix + "done:seckill:" + strconv.Itoa(user) + ":" + strconv.FormatInt(id, 10)
	for _, taken := range []bool{true, false} {
		if err := f.RDB.Set(ctx, key, other.OrderNo, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		chk := a.orders.CheckSeckill(ctx, user, id)
		want := other.OrderNo
		if taken {
			r := ride.Take(chk.Along(ctx))
			if r == nil {
				t.Fatal("the check built no ride for a product not sold out")
			}
			if _, err := f.RDB.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, c := range r.Cmds() {
					_ = p.Process(ctx, c)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			r.Done()
			if err := f.RDB.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
		}
		o, created, err := a.orders.PlaceSeckill(ctx, chk)
		if err != nil || created || o.OrderNo != want {
			t.Errorf("ride taken %v: %s, created %v, %v; want the marker's order %s (not the seckill order %s)", taken, o.OrderNo, created, err, want, first.OrderNo)
		}
	}
}
