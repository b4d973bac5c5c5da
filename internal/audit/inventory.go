package audit

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// The checks make few passes over the big tables, and join from the smaller
// side: every ledger row with an order number looks up its order (one
// unique-index probe), every payment looks up its order and its debit. Each
// pass counts, per product, the rows that are right; a product whose orders
// outnumber them has a fault, and only then do the queries that list the
// faulty rows run. Counting is exact because each order has at most one
// ledger row of each reason and at most one payment: the unique indexes say
// so, and cheap index-only queries check it (if they ever find a duplicate,
// every listing query runs).
//
// GROUP BY keys are written `col + 0` so MariaDB groups a table scan in a
// temporary table instead of walking a secondary index with one random
// primary-key lookup per row (several times slower at 10^5 rows).

const (
	// ledgerJoins gives each order o its `order` (lo) and `cancel` (lc)
	// ledger rows.
	ledgerJoins = `
LEFT JOIN stock_ledger lo ON lo.order_no = o.order_no AND lo.reason = 'order'
LEFT JOIN stock_ledger lc ON lc.order_no = o.order_no AND lc.reason = 'cancel'`
	paymentJoin = `
LEFT JOIN payments p ON p.order_no = o.order_no`

	// i4Fault holds for an order that did not take its stock exactly once,
	// or whose stock came back although it is not cancelled, or did not come
	// back (exactly) although it is.
	i4Fault = `lo.id IS NULL OR lo.delta <> -o.quantity OR lo.product_id <> o.product_id
   OR (o.status = 'cancelled' AND (lc.id IS NULL OR lc.delta <> o.quantity OR lc.product_id <> o.product_id))
   OR (o.status <> 'cancelled' AND lc.id IS NOT NULL)`
	// m1Fault holds for an order paid without a payment, or a payment that
	// does not match its order.
	m1Fault = `(o.status = 'paid' AND p.id IS NULL)
   OR (p.id IS NOT NULL AND (o.status <> 'paid' OR p.amount_cents <> o.amount_cents OR p.user_id <> o.user_id))`
)

type productRow struct {
	ID    int64 `gorm:"column:id"`
	Stock int64 `gorm:"column:stock"`
}

// bucketRow is a stock_buckets row (bucket 1..K-1 of a product).
type bucketRow struct {
	ProductID int64 `gorm:"column:product_id"`
	Bucket    int   `gorm:"column:bucket"`
	Stock     int64 `gorm:"column:stock"`
}

// orderAgg is one product's line of the orders pass.
type orderAgg struct {
	ProductID       int64 `gorm:"column:pid"`
	Orders          int64 `gorm:"column:n"`
	Sold            int64 `gorm:"column:sold"`
	Cancelled       int64 `gorm:"column:cancelled"` // quantity
	CancelledOrders int64 `gorm:"column:cancelled_orders"`
	PaidOrders      int64 `gorm:"column:paid_orders"`
	Seckill         int64 `gorm:"column:seckill"`
	SeckillUsers    int64 `gorm:"column:seckill_users"`
}

// ledgerAgg is one line of the ledger pass: the ledger rows of product
// LedgerProduct whose order (if any) is of product OrderProduct.
type ledgerAgg struct {
	LedgerProduct int64  `gorm:"column:lpid"`
	OrderProduct  *int64 `gorm:"column:opid"`
	Total         int64  `gorm:"column:total"`
	Added         int64  `gorm:"column:added"`
	Taken         int64  `gorm:"column:taken"` // order rows, as a positive amount
	Returned      int64  `gorm:"column:returned"`
	GoodTakes     int64  `gorm:"column:good_takes"`   // `order` rows matching their order
	GoodReturns   int64  `gorm:"column:good_returns"` // `cancel` rows matching their cancelled order
	LiveReturns   int64  `gorm:"column:live_returns"` // `cancel` rows of orders not cancelled
	Lost          int64  `gorm:"column:lost"`         // `order`/`cancel` rows naming no order
}

// products builds the per-product summaries and checks I1, I2 and I3 on
// them; its passes also tell orders() where to look for I4 and O1 faults.
func (c *checker) products() error {
	where, args := c.productFilter("id")
	var prods []productRow
	if err := c.scan(&prods, "SELECT id, stock FROM products WHERE 1=1"+where+" ORDER BY id", args...); err != nil {
		return err
	}
	if c.o.ProductID != 0 && len(prods) == 0 {
		return fmt.Errorf("%w: %d", ErrNotFound, c.o.ProductID)
	}
	// A product held in stock buckets (docs chapter 9) keeps its stock in
	// its products row (bucket 0) and its stock_buckets rows: I1-I3 judge
	// the sum, and I1 each bucket too.
	where, args = c.productFilter("product_id")
	var buckets []bucketRow
	if err := c.scan(&buckets, "SELECT product_id, bucket, stock FROM stock_buckets WHERE 1=1"+where+" ORDER BY product_id, bucket", args...); err != nil {
		return err
	}

	where, args = c.productFilter("o.product_id")
	if err := c.scan(&c.orderAggs, `SELECT o.product_id + 0 AS pid, COUNT(*) AS n,
  COALESCE(SUM(o.quantity), 0) AS sold,
  COALESCE(SUM(CASE WHEN o.status = 'cancelled' THEN o.quantity ELSE 0 END), 0) AS cancelled,
  COALESCE(SUM(CASE WHEN o.status = 'cancelled' THEN 1 ELSE 0 END), 0) AS cancelled_orders,
  COALESCE(SUM(CASE WHEN o.status = 'paid' THEN 1 ELSE 0 END), 0) AS paid_orders,
  COALESCE(SUM(CASE WHEN o.kind = 'seckill' THEN 1 ELSE 0 END), 0) AS seckill,
  COUNT(DISTINCT CASE WHEN o.kind = 'seckill' THEN o.user_id END) AS seckill_users
FROM orders o WHERE 1=1`+where+` GROUP BY pid`, args...); err != nil {
		return err
	}

	where, args = c.productFilter("l.product_id")
	var ledger []ledgerAgg
	if err := c.scan(&ledger, `SELECT l.product_id + 0 AS lpid, o.product_id + 0 AS opid,
  COALESCE(SUM(l.delta), 0) AS total,
  COALESCE(SUM(CASE WHEN l.reason IN ('create', 'restock') THEN l.delta ELSE 0 END), 0) AS added,
  COALESCE(SUM(CASE WHEN l.reason = 'order' THEN -l.delta ELSE 0 END), 0) AS taken,
  COALESCE(SUM(CASE WHEN l.reason = 'cancel' THEN l.delta ELSE 0 END), 0) AS returned,
  COALESCE(SUM(CASE WHEN l.reason = 'order' AND l.delta = -o.quantity AND l.product_id = o.product_id THEN 1 ELSE 0 END), 0) AS good_takes,
  COALESCE(SUM(CASE WHEN l.reason = 'cancel' AND o.status = 'cancelled' AND l.delta = o.quantity AND l.product_id = o.product_id THEN 1 ELSE 0 END), 0) AS good_returns,
  COALESCE(SUM(CASE WHEN l.reason = 'cancel' AND o.status <> 'cancelled' THEN 1 ELSE 0 END), 0) AS live_returns,
  COALESCE(SUM(CASE WHEN l.reason IN ('order', 'cancel') AND o.id IS NULL THEN 1 ELSE 0 END), 0) AS lost
FROM stock_ledger l LEFT JOIN orders o ON o.order_no = l.order_no
WHERE 1=1`+where+` GROUP BY lpid, opid`, args...); err != nil {
		return err
	}

	// The unique index on (order_no, reason) makes a second row of one
	// reason impossible; this index-only query proves it still does.
	where, args = c.productFilter("product_id")
	if err := c.scan(&c.ledgerDups, `SELECT COUNT(*) FROM (
  SELECT order_no FROM stock_ledger WHERE order_no IS NOT NULL`+where+`
  GROUP BY order_no, reason HAVING COUNT(*) > 1
) d`, args...); err != nil {
		return err
	}

	// Ledger rows and orders may name a product that has no row: they are
	// summarised with stock 0, so I2/I3 flag them.
	byID := map[int64]*ProductSummary{}
	get := func(id int64) *ProductSummary {
		s := byID[id]
		if s == nil {
			s = &ProductSummary{ProductID: id, Missing: true}
			byID[id] = s
		}
		return s
	}
	negative := map[int64][]bucketRow{} // buckets below zero, bucket 0 included
	for _, p := range prods {
		byID[p.ID] = &ProductSummary{ProductID: p.ID, Stock: p.Stock}
		if p.Stock < 0 {
			negative[p.ID] = append(negative[p.ID], bucketRow{ProductID: p.ID, Stock: p.Stock})
		}
	}
	for _, b := range buckets {
		get(b.ProductID).Stock += b.Stock
		if b.Stock < 0 {
			negative[b.ProductID] = append(negative[b.ProductID], b)
		}
	}
	taken := map[int64]int64{}
	good := map[int64][2]int64{} // product of the order: good takes, good returns
	c.i4Products, c.lostProducts = map[int64]bool{}, map[int64]bool{}
	for _, l := range ledger {
		s := get(l.LedgerProduct)
		s.Ledger += l.Total
		s.Added += l.Added
		s.Returned += l.Returned
		taken[l.LedgerProduct] += l.Taken
		if l.Lost > 0 {
			c.lostProducts[l.LedgerProduct] = true
		}
		if l.OrderProduct != nil {
			g := good[*l.OrderProduct]
			good[*l.OrderProduct] = [2]int64{g[0] + l.GoodTakes, g[1] + l.GoodReturns}
			if l.LiveReturns > 0 {
				c.i4Products[*l.OrderProduct] = true
			}
		}
	}
	for _, o := range c.orderAggs {
		s := get(o.ProductID)
		s.Sold, s.Cancelled = o.Sold, o.Cancelled
		// Every order needs one good `order` row, every cancelled one a good
		// `cancel` row; with a product filter a cancel row of another
		// product could hide, so the listing query always runs then.
		g := good[o.ProductID]
		if g[0] != o.Orders || g[1] != o.CancelledOrders || c.o.ProductID != 0 || c.ledgerDups > 0 {
			c.i4Products[o.ProductID] = true
		}
	}
	c.summaries = make([]ProductSummary, 0, len(byID))
	for _, s := range byID {
		c.summaries = append(c.summaries, *s)
	}
	sort.Slice(c.summaries, func(i, j int) bool { return c.summaries[i].ProductID < c.summaries[j].ProductID })

	for _, s := range c.summaries {
		row := map[string]any{
			"product_id": s.ProductID, "stock": s.Stock, "missing": s.Missing,
			"added": s.Added, "sold": s.Sold, "cancelled": s.Cancelled,
			"returned": s.Returned, "taken": taken[s.ProductID], "ledger": s.Ledger,
		}
		if !s.Missing {
			delete(row, "missing")
		}
		gone := ""
		if s.Missing {
			gone = " (no products row)"
		}
		if s.Stock < 0 {
			c.out.one(I1, s.ProductID, 0, fmt.Sprintf("stock is %d, below zero", s.Stock), row)
		} else if neg := negative[s.ProductID]; len(neg) > 0 {
			c.out.one(I1, s.ProductID, 0, fmt.Sprintf("stock bucket %d holds %d, below zero (the buckets sum to %d)", neg[0].Bucket, neg[0].Stock, s.Stock), row)
		}
		if held := s.Sold - s.Cancelled; s.Added != s.Stock+held {
			c.out.one(I2, s.ProductID, 0, fmt.Sprintf("added %d, but stock %d%s + %d held by orders not cancelled = %d: %s",
				s.Added, s.Stock, gone, held, s.Stock+held, imbalance(s)), row)
		}
		if s.Stock != s.Ledger {
			c.out.one(I3, s.ProductID, 0, fmt.Sprintf("stock %d%s but the stock ledger sums to %d (difference %+d)",
				s.Stock, gone, s.Ledger, s.Stock-s.Ledger), row)
		}
	}
	return nil
}

// orderLedgerRow is an order with its `order` and `cancel` ledger rows.
type orderLedgerRow struct {
	Order         orderRow `gorm:"embedded"`
	TakeID        *int64   `gorm:"column:take_id"`
	TakeDelta     *int64   `gorm:"column:take_delta"`
	TakeProduct   *int64   `gorm:"column:take_product"`
	ReturnID      *int64   `gorm:"column:return_id"`
	ReturnDelta   *int64   `gorm:"column:return_delta"`
	ReturnProduct *int64   `gorm:"column:return_product"`
}

type orderRow struct {
	ID          int64   `gorm:"column:id"`
	OrderNo     string  `gorm:"column:order_no"`
	UserID      int64   `gorm:"column:user_id"`
	ProductID   int64   `gorm:"column:product_id"`
	Quantity    int64   `gorm:"column:quantity"`
	AmountCents int64   `gorm:"column:amount_cents"`
	Kind        string  `gorm:"column:kind"`
	Status      string  `gorm:"column:status"`
	IdemKey     *string `gorm:"column:idem_key"`
}

func (o orderRow) row() map[string]any {
	m := map[string]any{
		"order_no": o.OrderNo, "user_id": o.UserID, "product_id": o.ProductID,
		"quantity": o.Quantity, "amount_cents": o.AmountCents, "kind": o.Kind, "status": o.Status,
	}
	if o.IdemKey != nil {
		m["idem_key"] = *o.IdemKey
	}
	return m
}

const orderCols = "o.id, o.order_no, o.user_id, o.product_id, o.quantity, o.amount_cents, o.kind, o.status, o.idem_key"

type ledgerRow struct {
	ID        int64   `gorm:"column:id"`
	ProductID int64   `gorm:"column:product_id"`
	Delta     int64   `gorm:"column:delta"`
	Reason    string  `gorm:"column:reason"`
	OrderNo   *string `gorm:"column:order_no"`
}

// I4 and O1-O2 faults; each is a format taking the count of rows.
const (
	faultNoTake       = "orders whose stock was never taken (no `order` ledger row): %d"
	faultBadTake      = "orders whose `order` ledger row takes another quantity or product than they hold: %d"
	faultNoReturn     = "cancelled orders whose stock never came back (no `cancel` ledger row): %d"
	faultBadReturn    = "cancelled orders whose `cancel` ledger row returns another quantity or product than they held: %d"
	faultReturnedLive = "%s orders whose stock was returned (only a cancelled order may have a `cancel` ledger row): %%d"
	faultLostOrder    = "`order` ledger rows naming no order (an order lost after its stock was taken): %d"
	faultLostCancel   = "`cancel` ledger rows naming no order: %d"
	faultDupLedger    = "`%s` ledger rows of an order that has another one: %%d"
	faultDupSeckill   = "seckill orders sharing a (user, product) pair, where one is allowed: %d"
	faultDupRegular   = "regular orders sharing a (user, idempotency key) pair, where one is allowed: %d"
)

// faulty lists the products whose line of the orders pass counts a fault.
func (c *checker) faulty(count func(orderAgg) bool) []int64 {
	var ids []int64
	for _, o := range c.orderAggs {
		if count(o) {
			ids = append(ids, o.ProductID)
		}
	}
	return ids
}

func keys(m map[int64]bool) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// orders lists the rows behind I4, O1 and O2 faults.
func (c *checker) orders() error {
	if ids := keys(c.i4Products); len(ids) > 0 {
		var rows []orderLedgerRow
		if err := c.scan(&rows, `SELECT `+orderCols+`,
  lo.id AS take_id, lo.delta AS take_delta, lo.product_id AS take_product,
  lc.id AS return_id, lc.delta AS return_delta, lc.product_id AS return_product
FROM orders o`+ledgerJoins+`
WHERE o.product_id IN ? AND (`+i4Fault+`)
ORDER BY o.product_id, o.id`, ids); err != nil {
			return err
		}
		for _, r := range rows {
			c.i4Order(r)
		}
	}

	if ids := keys(c.lostProducts); len(ids) > 0 {
		var lost []ledgerRow
		if err := c.scan(&lost, `SELECT l.id, l.product_id, l.delta, l.reason, l.order_no
FROM stock_ledger l LEFT JOIN orders o ON o.order_no = l.order_no
WHERE l.product_id IN ? AND l.reason IN ('order', 'cancel') AND o.id IS NULL
ORDER BY l.product_id, l.id`, ids); err != nil {
			return err
		}
		for _, l := range lost {
			fault := faultLostOrder
			if l.Reason == "cancel" {
				fault = faultLostCancel
			}
			c.out.add(bucketKey{invariant: I4, productID: l.ProductID, fault: fault}, 0, map[string]any{
				"ledger_id": l.ID, "product_id": l.ProductID, "delta": l.Delta, "reason": l.Reason, "order_no": l.OrderNo,
			})
		}
	}

	if c.ledgerDups > 0 {
		where, args := c.productFilter("product_id")
		var rows []ledgerRow
		if err := c.scan(&rows, `SELECT l.id, l.product_id, l.delta, l.reason, l.order_no
FROM stock_ledger l JOIN (
  SELECT order_no, reason FROM stock_ledger WHERE order_no IS NOT NULL`+where+`
  GROUP BY order_no, reason HAVING COUNT(*) > 1
) d ON d.order_no = l.order_no AND d.reason = l.reason
ORDER BY l.product_id, l.order_no, l.id`, args...); err != nil {
			return err
		}
		for _, l := range rows {
			c.out.add(bucketKey{invariant: I4, productID: l.ProductID, fault: fmt.Sprintf(faultDupLedger, l.Reason)}, 0,
				map[string]any{"ledger_id": l.ID, "product_id": l.ProductID, "delta": l.Delta, "reason": l.Reason, "order_no": l.OrderNo})
		}
	}

	// O1: a product with fewer seckill buyers than seckill orders.
	if ids := c.faulty(func(o orderAgg) bool { return o.Seckill != o.SeckillUsers }); len(ids) > 0 {
		var seckill []orderRow
		if err := c.scan(&seckill, `SELECT `+orderCols+`
FROM orders o JOIN (
  SELECT user_id, product_id FROM orders WHERE kind = 'seckill' AND product_id IN ?
  GROUP BY user_id, product_id HAVING COUNT(*) > 1
) d ON d.user_id = o.user_id AND d.product_id = o.product_id
WHERE o.kind = 'seckill'
ORDER BY o.product_id, o.user_id, o.id`, ids); err != nil {
			return err
		}
		for _, o := range seckill {
			c.out.add(bucketKey{invariant: O1, productID: o.ProductID, fault: faultDupSeckill}, o.UserID, o.row())
		}
	}
	return c.regular()
}

// i4Order files one order of the I4 detail query under its faults.
func (c *checker) i4Order(r orderLedgerRow) {
	o := r.Order
	m := o.row()
	m["order_ledger_id"], m["order_ledger_delta"] = r.TakeID, r.TakeDelta
	m["cancel_ledger_id"], m["cancel_ledger_delta"] = r.ReturnID, r.ReturnDelta
	if r.TakeProduct != nil && *r.TakeProduct != o.ProductID {
		m["order_ledger_product_id"] = *r.TakeProduct
	}
	if r.ReturnProduct != nil && *r.ReturnProduct != o.ProductID {
		m["cancel_ledger_product_id"] = *r.ReturnProduct
	}
	add := func(fault string) {
		c.out.add(bucketKey{invariant: I4, productID: o.ProductID, fault: fault}, o.UserID, m)
	}
	switch {
	case r.TakeID == nil:
		add(faultNoTake)
	case *r.TakeDelta != -o.Quantity || *r.TakeProduct != o.ProductID:
		add(faultBadTake)
	}
	switch {
	case o.Status == "cancelled" && r.ReturnID == nil:
		add(faultNoReturn)
	case o.Status == "cancelled" && (*r.ReturnDelta != o.Quantity || *r.ReturnProduct != o.ProductID):
		add(faultBadReturn)
	case o.Status != "cancelled" && r.ReturnID != nil:
		add(fmt.Sprintf(faultReturnedLive, r.Order.Status))
	}
}

// regular checks O2: users with fewer distinct idempotency keys than keyed
// regular orders, then their duplicate orders.
func (c *checker) regular() error {
	where, args := c.productFilter("product_id")
	var users []int64
	if err := c.scan(&users, `SELECT user_id + 0 AS uid FROM orders
WHERE kind = 'regular' AND idem_key IS NOT NULL`+where+`
GROUP BY uid HAVING COUNT(*) <> COUNT(DISTINCT idem_key) ORDER BY uid`, args...); err != nil {
		return err
	}
	type pair struct {
		user int64
		key  string
	}
	for len(users) > 0 {
		chunk := users[:min(len(users), 500)]
		users = users[len(chunk):]
		var rows []orderRow
		if err := c.scan(&rows, `SELECT `+orderCols+` FROM orders o
WHERE o.kind = 'regular' AND o.idem_key IS NOT NULL AND o.user_id IN ?`+where+`
ORDER BY o.product_id, o.user_id, o.idem_key, o.id`, append([]any{chunk}, args...)...); err != nil {
			return err
		}
		n := map[pair]int{}
		for _, o := range rows {
			n[pair{o.UserID, *o.IdemKey}]++
		}
		for _, o := range rows {
			if n[pair{o.UserID, *o.IdemKey}] > 1 {
				c.out.add(bucketKey{invariant: O2, productID: o.ProductID, fault: faultDupRegular}, o.UserID, o.row())
			}
		}
	}
	return nil
}

// mirror checks R1 against the summaries, after the snapshot is closed so
// no transaction stays open across Redis calls.
//
// The redis-gate strategy takes units from a Redis counter (the gate)
// before the database is touched, and holds them under a lease for the
// request until its batch commits (sold) or refuses it (given back). Two
// faults, per product:
//
//   - gate > stock: the gate lets through buyers the database cannot serve;
//     it no longer guards the stock, and any path that trusts it oversells.
//   - gate + held < stock: units left the gate that no live hold accounts
//     for (held counts holds whose lease has not ended): a dead holder's
//     units that no reaper brought back, or units taken without a hold.
//     Lost, they are never sold: an undersell.
//
// In flight neither holds (a committed order's units stay held until its
// request settles, so gate + held only exceeds the stock) except for the
// moment between a restock's or a cancellation's commit and its gate
// update, and the skew of reading the database and Redis one after the
// other. A suspect product is therefore read again, Redis before and after
// a fresh read of the stock, up to three times, and reported only when
// every reading shows the fault.
func (c *checker) mirror(ctx context.Context) error {
	if c.o.StockMirror == nil {
		return nil
	}
	for i := range c.summaries {
		s := &c.summaries[i]
		if s.Missing {
			continue
		}
		units, held, ok, err := c.o.StockMirror(ctx, s.ProductID)
		if err != nil {
			return fmt.Errorf("audit: stock mirror of product %d: %w", s.ProductID, err)
		}
		if !ok {
			continue
		}
		s.Mirror = &units
		r := mirrorReading{stock: s.Stock, units: units, held: held}
		if r.fault() == "" {
			continue
		}
		if r, err = c.confirm(ctx, s.ProductID); err != nil {
			return err
		}
		if f := r.fault(); f != "" {
			c.out.one(R1, s.ProductID, 0, f,
				map[string]any{"product_id": s.ProductID, "stock": r.stock, "mirror": r.units, "held": r.held})
		}
	}
	return nil
}

// mirrorReading is one comparison of a stock mirror with the database.
type mirrorReading struct {
	stock, units, held int64
}

// fault describes R1's fault in r, or is "".
func (r mirrorReading) fault() string {
	switch {
	case r.units > r.stock:
		return fmt.Sprintf("the stock mirror admits %d but the database has %d left: %d too many would get through",
			r.units, r.stock, r.units-r.stock)
	case r.units+r.held < r.stock:
		return fmt.Sprintf("the stock mirror admits %d and holds %d for requests in flight, but the database has %d left: %d units lost (taken by a process that died and not returned)",
			r.units, r.held, r.stock, r.stock-r.units-r.held)
	}
	return ""
}

// confirm reads a suspect product again: the mirror, the stock, the mirror.
// A too-high gate must show in both mirror readings, lost units in both;
// the reading returned has no fault when one attempt showed none.
func (c *checker) confirm(ctx context.Context, productID int64) (mirrorReading, error) {
	var r mirrorReading
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return r, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		u1, h1, ok1, err := c.o.StockMirror(ctx, productID)
		if err != nil {
			return r, err
		}
		var stock int64
		if err := c.db.WithContext(ctx).Raw("SELECT p.stock + COALESCE((SELECT SUM(b.stock) FROM stock_buckets b WHERE b.product_id = p.id), 0) FROM products p WHERE p.id = ?", productID).Row().Scan(&stock); err != nil {
			return r, fmt.Errorf("audit: stock of product %d: %w", productID, err)
		}
		u2, h2, ok2, err := c.o.StockMirror(ctx, productID)
		if err != nil {
			return r, err
		}
		if !ok1 || !ok2 {
			return mirrorReading{}, nil
		}
		units := min(u1, u2)
		r = mirrorReading{stock: stock, units: units, held: max(u1+h1, u2+h2) - units}
		if r.fault() == "" {
			return r, nil
		}
	}
	return r, nil
}

// imbalance says how an I2 mismatch splits: units oversold (ProductSummary.
// Oversold, the one definition), stock nothing backs, or units lost.
func imbalance(s ProductSummary) string {
	d := s.Stock + s.Sold - s.Cancelled - s.Added
	if d < 0 {
		return fmt.Sprintf("%d neither in stock nor held by an order", -d)
	}
	var parts []string
	if o := s.Oversold(); o > 0 {
		parts = append(parts, fmt.Sprintf("oversold by %d (orders hold %d units more than were added)", o, o))
	}
	if phantom := d - s.Oversold(); phantom > 0 {
		parts = append(parts, fmt.Sprintf("%d units of stock that were already sold", phantom))
	}
	return strings.Join(parts, "; ")
}
