// Package audit checks, from the database alone, the invariants of
// docs/invariants.md that rows can show: inventory (I1-I4), orders (O1-O2) and
// money (M1-M2), plus optionally a Redis stock mirror against the database
// (R1). It is the one checker behind GET /api/v1/admin/audit, `shop verify`
// and the load-test harness, so all three judge a run by the same rules.
//
// Every check is an aggregate or anti-join query that runs unchanged on MySQL
// and SQLite, all inside one read-only snapshot, so a check run during traffic
// never sees an order without the ledger row written in the same transaction.
package audit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
)

// ErrNotFound is returned when Options.ProductID names no product, so the
// HTTP layer can answer 404 rather than an empty, passing report.
var ErrNotFound = errors.New("audit: product not found")

// Invariant identifiers, as docs/invariants.md names them.
const (
	I1 = "I1" // stock >= 0
	I2 = "I2" // added = stock + units held by orders not cancelled
	I3 = "I3" // products.stock = sum of the product's stock ledger
	I4 = "I4" // each order takes its stock once and returns it at most once
	O1 = "O1" // one seckill order per (user, product)
	O2 = "O2" // one regular order per (user, idempotency key)
	M1 = "M1" // one payment per order; balance = credits - payments
	M2 = "M2" // balance >= 0
	R1 = "R1" // the Redis stock mirror admits no more than the database holds, and loses no unit
)

// Options narrows a check.
type Options struct {
	// ProductID limits the check to one product; wallet (M1, M2) checks are
	// then left out because wallets span products. 0 checks everything.
	ProductID int64
	// MaxRows caps the rows attached to one violation (default 20); the
	// detail still counts them all.
	MaxRows int
	// StockMirror, when set, returns, read at one instant, the units a
	// stock mirror (the redis-gate strategy's Redis counter) would still
	// admit for a product and the units it holds for requests in flight
	// (taken, lease not ended), and false when it keeps none for the
	// product. Nil leaves R1 out.
	StockMirror func(ctx context.Context, productID int64) (units, held int64, ok bool, err error)
}

// Report is the outcome of one check. Violations is never nil, so its JSON
// form is [] on a clean run.
type Report struct {
	OK         bool             `json:"ok"`
	CheckedAt  time.Time        `json:"checked_at"`
	Products   []ProductSummary `json:"products"`
	Wallets    []WalletSummary  `json:"wallets,omitempty"`
	Violations []Violation      `json:"violations"`
	// Lab holds, in a shop-wide check, the products lab races created and
	// their violations: the lesson of a race run with an unsafe strategy,
	// which therefore never changes OK. Nil when one product was asked for.
	Lab *LabReport `json:"lab,omitempty"`
}

// LabReport is the lab part of a shop-wide report. Violations is never nil.
type LabReport struct {
	Products   []LabProduct `json:"products"`
	Violations []Violation  `json:"violations"`
}

// LabProduct is a lab race's product with the strategy its buyers raced under.
type LabProduct struct {
	ProductSummary
	StockStrategy string `json:"stock_strategy"`
}

// ProductSummary holds the numbers I1-I3 are judged on.
//
// Sold counts the units of every order ever created for the product,
// cancelled ones included, and Returned the units the ledger gave back on
// cancellation, so on a consistent product
// Stock = Added - Sold + Returned and Cancelled = Returned.
type ProductSummary struct {
	ProductID int64 `json:"product_id"`
	Stock     int64 `json:"stock"`
	Added     int64 `json:"added"`     // create + restock ledger rows
	Sold      int64 `json:"sold"`      // quantity of all orders, cancelled included
	Returned  int64 `json:"returned"`  // cancel ledger rows
	Cancelled int64 `json:"cancelled"` // quantity of cancelled orders
	Ledger    int64 `json:"ledger"`    // sum of all the product's ledger rows
	// Mirror is the StockMirror value, when one was asked for and exists.
	Mirror *int64 `json:"mirror,omitempty"`
	// Missing marks a product id that ledger rows or orders name but that has
	// no products row (its Stock is then 0).
	Missing bool `json:"missing,omitempty"`
}

// Oversold is the project's one definition of an oversell, used by the
// audit's I1/I2 details, the load-test harness, the demo page and the docs:
// the units held by orders not cancelled beyond the units ever put on sale
// (creation + restocks), never negative. Stock that a lost update left
// behind is not counted here: those units were already sold, and I2 reports
// them separately as stock nothing backs.
func (s ProductSummary) Oversold() int64 { return max(0, s.Sold-s.Cancelled-s.Added) }

// WalletSummary holds the numbers M1-M2 are judged on for one user.
type WalletSummary struct {
	UserID   int64 `json:"user_id"`
	Balance  int64 `json:"balance_cents"`
	Ledger   int64 `json:"ledger_cents"`   // sum of the wallet ledger
	Credited int64 `json:"credited_cents"` // credit rows
	Paid     int64 `json:"paid_cents"`     // payment rows, as a positive amount
	// Missing marks a user with wallet ledger rows but no wallets row.
	Missing bool `json:"missing,omitempty"`
}

// Violation is one broken invariant for one product or one user, with the
// rows that show it (at most Options.MaxRows).
type Violation struct {
	Invariant string           `json:"invariant"`
	ProductID int64            `json:"product_id,omitempty"`
	UserID    int64            `json:"user_id,omitempty"`
	Detail    string           `json:"detail"`
	Rows      []map[string]any `json:"rows"`
}

// Check runs every check Options allows against db and reports what it found.
// An error means the check could not run, never that an invariant broke.
func Check(ctx context.Context, db *gorm.DB, o Options) (Report, error) {
	if o.MaxRows <= 0 {
		o.MaxRows = 20
	}
	c := &checker{db: db, o: o, out: newBuckets(o.MaxRows)}
	err := snapshot(ctx, db, func(tx *gorm.DB) error {
		c.tx = tx
		c.checkedAt = time.Now().UTC()
		if err := c.products(); err != nil {
			return err
		}
		if err := c.orders(); err != nil {
			return err
		}
		if o.ProductID != 0 {
			return nil
		}
		if err := c.scan(&c.labRows, "SELECT product_id, stock_strategy FROM lab_products ORDER BY product_id"); err != nil {
			return err
		}
		return c.money()
	})
	if err != nil {
		return Report{}, err
	}
	if err := c.mirror(ctx); err != nil {
		return Report{}, err
	}
	r := Report{
		CheckedAt:  c.checkedAt,
		Products:   c.summaries,
		Wallets:    c.wallets,
		Violations: c.out.violations(),
	}
	if o.ProductID == 0 {
		r.Lab = c.labApart(&r)
	}
	if r.Products == nil {
		r.Products = []ProductSummary{}
	}
	r.OK = len(r.Violations) == 0
	return r, nil
}

// labApart moves the lab products of r, and the violations that name them,
// into the lab report.
func (c *checker) labApart(r *Report) *LabReport {
	strategy := make(map[int64]string, len(c.labRows))
	for _, l := range c.labRows {
		strategy[l.ProductID] = l.StockStrategy
	}
	lab := &LabReport{Products: []LabProduct{}, Violations: []Violation{}}
	shop := r.Products[:0:0]
	for _, p := range r.Products {
		if s, ok := strategy[p.ProductID]; ok {
			lab.Products = append(lab.Products, LabProduct{ProductSummary: p, StockStrategy: s})
		} else {
			shop = append(shop, p)
		}
	}
	violations := []Violation{}
	for _, v := range r.Violations {
		if _, ok := strategy[v.ProductID]; ok && v.ProductID != 0 {
			lab.Violations = append(lab.Violations, v)
		} else {
			violations = append(violations, v)
		}
	}
	r.Products, r.Violations = shop, violations
	return lab
}

// snapshot runs fn in one read-only transaction, so every query sees the
// same committed state. MySQL/MariaDB gets a repeatable-read snapshot; the
// SQLite driver takes no transaction options and its transactions are
// serializable anyway.
func snapshot(ctx context.Context, db *gorm.DB, fn func(tx *gorm.DB) error) error {
	err := dbx.ReadTx(ctx, db, fn)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("audit: %w", err)
	}
	return err
}

// checker carries one run's state through the individual checks.
type checker struct {
	db        *gorm.DB // for reads outside the snapshot (R1's second look)
	tx        *gorm.DB
	o         Options
	checkedAt time.Time
	summaries []ProductSummary
	wallets   []WalletSummary
	out       *buckets

	// what the passes found, for the queries that list faulty rows
	orderAggs    []orderAgg
	ledgerDups   int64          // orders with two ledger rows of one reason
	i4Products   map[int64]bool // products with an I4 fault of their orders
	lostProducts map[int64]bool // products with ledger rows naming no order

	labRows []struct { // lab_products, in a shop-wide check
		ProductID     int64
		StockStrategy string
	}
}

// scan runs one read query into dest (a pointer to a slice of structs).
func (c *checker) scan(dest any, query string, args ...any) error {
	return c.tx.Raw(query, args...).Scan(dest).Error
}

// productFilter is the SQL condition and arguments that restrict column col
// to Options.ProductID, or nothing when every product is checked.
func (c *checker) productFilter(col string) (string, []any) {
	if c.o.ProductID == 0 {
		return "", nil
	}
	return " AND " + col + " = ?", []any{c.o.ProductID}
}

// bucketKey names one violation: one fault of one invariant for one product
// or user. Rows of the same fault are gathered under it, so a run with ten
// thousand duplicate orders yields one violation per product, not ten
// thousand.
type bucketKey struct {
	invariant string
	productID int64
	userID    int64
	fault     string // a fmt format taking the count of faulty rows, or a final detail
}

type bucket struct {
	key   bucketKey
	final bool // fault is the detail as it stands
	n     int
	rows  []map[string]any
	users map[int64]bool
}

type buckets struct {
	max   int
	order []*bucket
	m     map[bucketKey]*bucket
}

func newBuckets(max int) *buckets {
	return &buckets{max: max, m: map[bucketKey]*bucket{}}
}

func (b *buckets) get(k bucketKey) *bucket {
	v := b.m[k]
	if v == nil {
		v = &bucket{key: k, users: map[int64]bool{}}
		b.m[k] = v
		b.order = append(b.order, v)
	}
	return v
}

// add counts one faulty row under its violation, keeping the first max rows.
// userID, when set, records whose row it is: a violation whose rows all
// belong to one user names that user.
func (b *buckets) add(k bucketKey, userID int64, row map[string]any) {
	v := b.get(k)
	v.n++
	if userID != 0 {
		v.users[userID] = true
	}
	if len(v.rows) < b.max {
		v.rows = append(v.rows, row)
	}
}

// one records a violation whose detail is already final.
func (b *buckets) one(invariant string, productID, userID int64, detail string, rows ...map[string]any) {
	v := b.get(bucketKey{invariant: invariant, productID: productID, userID: userID, fault: detail})
	v.final = true
	v.n++
	v.rows = append(v.rows, rows...)
	if len(v.rows) > b.max {
		v.rows = v.rows[:b.max]
	}
}

var rank = map[string]int{I1: 1, I2: 2, I3: 3, I4: 4, O1: 5, O2: 6, M1: 7, M2: 8, R1: 9}

// violations turns the buckets into the report's list, ordered by invariant,
// then product, then user.
func (b *buckets) violations() []Violation {
	out := make([]Violation, 0, len(b.order))
	for _, v := range b.order {
		rows := v.rows
		if rows == nil {
			rows = []map[string]any{}
		}
		userID := v.key.userID
		if userID == 0 && len(v.users) == 1 {
			for u := range v.users {
				userID = u
			}
		}
		detail := v.key.fault
		if !v.final {
			detail = fmt.Sprintf(v.key.fault, v.n)
		}
		out = append(out, Violation{
			Invariant: v.key.invariant,
			ProductID: v.key.productID,
			UserID:    userID,
			Detail:    detail,
			Rows:      rows,
		})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if rank[a.Invariant] != rank[b.Invariant] {
			return rank[a.Invariant] < rank[b.Invariant]
		}
		if a.ProductID != b.ProductID {
			return a.ProductID < b.ProductID
		}
		return a.UserID < b.UserID
	})
	return out
}
