package inventory

import (
	"context"
	"errors"

	"gorm.io/gorm"
)

// Stock buckets (docs chapter 9, "Scaling a hot product"): a product
// created while Config.Buckets is K > 1 holds its stock in K rows, each
// with its own lock key and fence, so K leaders (one per instance, each
// starting at its home bucket) can deduct side by side. Bucket 0 is the
// products row itself; buckets 1..K-1 are stock_buckets rows. The product's
// stock is the sum: Get and List report it, the audit checks it.
//
// A batch walks the buckets (walk.go).
//
// Restocks spread their units over the buckets (spread); returns of
// cancelled orders go to bucket 0 (ReturnTx). Only lock-fence walks
// buckets: the shop refuses to start with K > 1 under another strategy,
// and a product held in buckets is walked by lock-fence whatever a lab
// switch says (resolve).

// MaxBuckets bounds K: the empty-bucket memory is one 64-bit mask.
const MaxBuckets = 64

// stockBucket is a row of stock_buckets, bucket 1..K-1 of a product (bucket
// 0, the products row, is read into one too).
type stockBucket struct {
	ProductID   int64 `gorm:"primaryKey"`
	Bucket      int   `gorm:"primaryKey"`
	Stock       int64
	Fence       int64
	FenceHolder string
	Version     int64
}

func (stockBucket) TableName() string { return "stock_buckets" }

// spread splits units as evenly as it goes over k buckets, the remainder
// one each to the first buckets.
func spread(units int64, k int) []int64 {
	out := make([]int64, k)
	for b := range out {
		out[b] = units / int64(k)
		if int64(b) < units%int64(k) {
			out[b]++
		}
	}
	return out
}

// createBuckets inserts buckets 1.. of a new product (shares[0] is on its
// products row).
func createBuckets(tx *gorm.DB, id int64, shares []int64) error {
	if len(shares) <= 1 {
		return nil
	}
	rows := make([]stockBucket, 0, len(shares)-1)
	for b, n := range shares[1:] {
		rows = append(rows, stockBucket{ProductID: id, Bucket: b + 1, Stock: n})
	}
	return tx.Create(&rows).Error
}

// addStock adds shares[b] units to bucket b (a restock), each under the
// fence of h's lock of that bucket, so a restock by a holder whose lease
// ran out is refused like its deduction would be (errStaleFence: a new
// hold, see staleFenceRetry). The products row is always written (a
// one-bucket product's restock is one UPDATE); other buckets only when
// they get units.
func addStock(tx *gorm.DB, id int64, shares []int64, h *hold) error {
	for b, n := range shares {
		if n == 0 && b > 0 {
			continue
		}
		if err := mustMove(tx, id, b, n, h.fence(b)); err != nil {
			return err
		}
	}
	return nil
}

// totalSelect reads products with their buckets' stock and versions summed
// in the same statement (one snapshot).
const totalSelect = `products.*,
 (SELECT COALESCE(SUM(b.stock), 0) FROM stock_buckets b WHERE b.product_id = products.id) AS bucket_stock,
 (SELECT COALESCE(SUM(b.version), 0) FROM stock_buckets b WHERE b.product_id = products.id) AS bucket_version`

type totalRow struct {
	Product
	BucketStock   int64
	BucketVersion int64
}

// readTotals reads the products q selects, each with Stock the sum over its
// buckets and Version its row's plus its buckets' (any deduction moves it,
// so the sold-out book's version check holds for bucketed products too).
func readTotals(q *gorm.DB) ([]Product, error) {
	var rows []totalRow
	if err := q.Table("products").Select(totalSelect).Scan(&rows).Error; err != nil {
		return nil, err
	}
	ps := make([]Product, len(rows))
	for i, r := range rows {
		ps[i] = r.Product
		ps[i].Stock += r.BucketStock
		ps[i].Version += r.BucketVersion
	}
	return ps, nil
}

func readTotal(db *gorm.DB, id int64) (Product, error) {
	ps, err := readTotals(db.Where("products.id = ?", id))
	if err != nil {
		return Product{}, err
	}
	if len(ps) == 0 {
		return Product{}, ErrNotFound
	}
	return ps[0], nil
}

// bucketsOf is a product's K, read once (it never changes). A product not
// found is taken as one bucket: its deduction answers ErrNotFound.
// That answer is not remembered (the product may be created the next
// moment), so an order for an id that does not exist costs a primary-key
// read in Deduct, besides the deduction that refuses it.
func (s *Service) bucketsOf(ctx context.Context, id int64) (int, error) {
	if k, ok := s.buckets.Load(id); ok {
		return k.(int), nil
	}
	var p Product
	err := s.db.WithContext(ctx).Select("id", "buckets").Take(&p, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	k := max(1, p.Buckets)
	s.buckets.Store(id, k)
	return k, nil
}

// price is the product's unit price (it never changes), remembered.
func (s *Service) price(tx *gorm.DB, id int64) (int64, error) {
	if p, ok := s.prices.Load(id); ok {
		return p.(int64), nil
	}
	p, err := readProduct(tx, id)
	if err != nil {
		return 0, err
	}
	s.prices.Store(id, p.PriceCents)
	return p.PriceCents, nil
}

// forget ends what this instance knows of a product's empty stock (its
// stock came back): the sold-out book's entry and the empty buckets.
func (s *Service) forget(id int64) {
	s.soldOut.forget(id)
	s.empty.clear(id)
}
