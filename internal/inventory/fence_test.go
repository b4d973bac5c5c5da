package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/inventory"
)

// TestRestocksAndReturnsAreFenced: every write to the products row (a
// deduction, a restock, a return of cancelled orders) takes the product
// lock's fence, so once the row has seen fence 1000, a write from an older
// hold is refused and changes nothing, whichever kind of write it is.
func TestRestocksAndReturnsAreFenced(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(t, inventory.Config{Strategy: inventory.LockFence})
	id := f.product(t, s, 10)
	ctx := context.Background()
	if err := f.DB.Exec("UPDATE products SET fence = 1000, fence_holder = 'newer' WHERE id = ?", id).Error; err != nil {
		t.Fatal(err)
	}
	fenceOf := func() (n int64) {
		t.Helper()
		if err := f.DB.Raw("SELECT fence FROM products WHERE id = ?", id).Row().Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A return under fence 1 (a holder whose lease ran out long ago).
	no := fmt.Sprintf("F%d", id)
	err := dbx.Tx(ctx, f.DB, func(tx *gorm.DB) error {
		return s.ReturnTx(tx, id, inventory.Fence{Number: 1, Holder: "old"}, []inventory.Want{{OrderNo: no, Quantity: 3}})
	})
	if !errors.Is(err, inventory.ErrStaleFence) {
		t.Fatalf("return under an older fence: %v, want it refused as stale", err)
	}
	var rows int64
	f.DB.Raw("SELECT COUNT(*) FROM stock_ledger WHERE product_id = ? AND reason = 'cancel'", id).Row().Scan(&rows)
	if stock, _, _ := f.state(t, id); stock != 10 || rows != 0 || fenceOf() != 1000 {
		t.Errorf("after the refused return: stock %d, cancel ledger rows %d, fence %d; want 10, 0, 1000", stock, rows, fenceOf())
	}

	// A restock: the lock hands out a fence far below 1000 (the counter knows
	// nothing of the row), the row refuses it, the service raises the counter
	// to 1000 and restocks under 1001.
	if _, _, err := s.Restock(ctx, id, 5, "", ""); err != nil {
		t.Fatalf("restock: %v", err)
	}
	if got := counter(t, s.reg, "shop_inventory_stale_fence_rejections_total"); got != 1 {
		t.Errorf("stale fence rejections = %v, want 1 (the restock's first hold)", got)
	}
	var ledgerFence int64
	f.DB.Raw("SELECT fence FROM stock_ledger WHERE product_id = ? AND reason = 'restock'", id).Row().Scan(&ledgerFence)
	if got := fenceOf(); got != 1001 || ledgerFence != 1001 {
		t.Errorf("after the restock: row fence %d, ledger fence %d; want 1001, 1001", got, ledgerFence)
	}
	if stock, ledger, _ := f.state(t, id); stock != 15 || ledger != 15 {
		t.Errorf("after the restock: stock %d, ledger %d; want 15, 15", stock, ledger)
	}
}
