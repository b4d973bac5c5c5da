package inventory

import (
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
)

// The stock writes. Every write to a stock row but the lab's
// read-modify-write is moveBucket: the row's stock moves by delta (negative
// takes), only while the stock covers a take, and, with a fence, only while
// the row takes that fence (refuses says the same), recording the fence and
// its holder. Bucket 0 is the products row, buckets 1..K-1 stock_buckets
// rows (buckets.go).

// moveBucket writes bucket b of product id; RowsAffected says whether it
// happened.
func moveBucket(tx *gorm.DB, id int64, bucket int, delta int64, fence Fence) *gorm.DB {
	q, args := moveSQL(id, bucket, delta, fence)
	return tx.Exec(q, args...)
}

// moveSQL is moveBucket's statement.
func moveSQL(id int64, bucket int, delta int64, fence Fence) (string, []any) {
	if bucket == 0 {
		q, args := "UPDATE products SET stock = stock + ?, version = version + 1, updated_at = ?", []any{delta, dbx.Now()}
		return guardedMove(q, args, " WHERE id = ?", []any{id}, delta, fence)
	}
	return guardedMove("UPDATE stock_buckets SET stock = stock + ?, version = version + 1", []any{delta},
		" WHERE product_id = ? AND bucket = ?", []any{id, bucket}, delta, fence)
}

// guardedMove completes a stock row's UPDATE (set, then where) with the
// fence it records and the conditions moveBucket states.
func guardedMove(q string, args []any, where string, whereArgs []any, delta int64, fence Fence) (string, []any) {
	if fence.Number > 0 {
		q, args = q+", fence = ?, fence_holder = ?", append(args, fence.Number, fence.Holder)
	}
	q, args = q+where, append(args, whereArgs...)
	if delta < 0 {
		q, args = q+" AND stock >= ?", append(args, -delta)
	}
	if fence.Number > 0 {
		q, args = q+" AND (fence < ? OR (fence = ? AND fence_holder = ?))", append(args, fence.Number, fence.Number, fence.Holder)
	}
	return q, args
}

// mustMove is moveBucket for a write that must happen. One that changed no
// row is decided by re-reading the row: errStaleFence when it refuses the
// fence, else a MissedWrite (the row moved under a holder that had read
// it: a writer that holds no lock, or SQLite, which has no row lock), which
// is ErrBusy: nothing was changed, the caller may retry.
func mustMove(tx *gorm.DB, id int64, bucket int, delta int64, fence Fence) error {
	res := moveBucket(tx, id, bucket, delta, fence)
	if res.Error != nil || res.RowsAffected == 1 {
		return res.Error
	}
	if r, err := readBucket(tx, id, bucket); err == nil && r.refuses(fence) {
		return errStaleFence
	}
	return &MissedWrite{ProductID: id, Bucket: bucket}
}

// MissedWrite is a stock write that had to happen and changed no row.
type MissedWrite struct {
	ProductID int64
	Bucket    int
}

func (e *MissedWrite) Error() string {
	return fmt.Sprintf("inventory: the stock write to product %d bucket %d changed no row", e.ProductID, e.Bucket)
}

// Unwrap makes it ErrBusy.
func (e *MissedWrite) Unwrap() error { return ErrBusy }

// refuses says whether the row takes no write under fence: a newer fence
// has written, or the same fence from another holder (the fence counter
// lost its last INCR in a failover and handed the number out twice). The
// holder that wrote a fence may write again under it; the zero Fence (no
// lock, or lock-conditional) is never refused.
func (r stockBucket) refuses(fence Fence) bool {
	if fence.Number <= 0 {
		return false
	}
	return r.Fence > fence.Number || (r.Fence == fence.Number && r.FenceHolder != fence.Holder)
}

// refuses is stockBucket.refuses for the products row.
func (p Product) refuses(fence Fence) bool {
	return stockBucket{Fence: p.Fence, FenceHolder: p.FenceHolder}.refuses(fence)
}

func readProduct(db *gorm.DB, id int64) (Product, error) {
	var p Product
	err := db.Take(&p, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return p, ErrNotFound
	}
	return p, err
}

// readBucket reads one bucket's row (0: the products row's stock and fence).
func readBucket(db *gorm.DB, id int64, bucket int) (stockBucket, error) {
	if bucket == 0 {
		p, err := readProduct(db, id)
		return stockBucket{ProductID: id, Stock: p.Stock, Fence: p.Fence, FenceHolder: p.FenceHolder, Version: p.Version}, err
	}
	var r stockBucket
	err := db.Where("product_id = ? AND bucket = ?", id, bucket).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return r, ErrNotFound
	}
	return r, err
}

// ledgerColumns are the columns of a deduction's ledger rows.
var ledgerColumns = []string{"product_id", "delta", "reason", "order_no", "fence", "bucket", "created_at"}

// ledgerRows are one order row per served want (refused nil, or
// refused[i] nil), taken from bucket under held.
func ledgerRows(id int64, bucket int, held Fence, wants []Want, refused []error) [][]any {
	rows := make([][]any, 0, len(wants))
	now := dbx.Now()
	for i, w := range wants {
		if refused == nil || refused[i] == nil {
			rows = append(rows, []any{id, -w.Quantity, ReasonOrder, w.OrderNo, held.Number, bucket, now})
		}
	}
	return rows
}

// packetLedger is ledger for a packet whose every want is served: the
// rows written only if the packet's guard matched.
func packetLedger(p *dbx.Packet, id int64, bucket int, held Fence, wants []Want) {
	p.Insert("stock_ledger", ledgerColumns, ledgerRows(id, bucket, held, wants, nil))
}

// ledger appends one order row per served want (refused[i] nil), taken
// from bucket under held, in one INSERT.
func ledger(tx *gorm.DB, id int64, bucket int, held Fence, wants []Want, refused []error) error {
	return dbx.Insert(tx, "stock_ledger", ledgerColumns, ledgerRows(id, bucket, held, wants, refused))
}
