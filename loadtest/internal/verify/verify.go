// Package verify judges a run: it proves from the database (audit, stock
// facts, fencing tokens) and from the clients' own records that nothing was
// oversold, ordered twice, lost or charged twice, and returns the verdict
// a report prints.
package verify

import (
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/loadgen"
)

// L2 is the lock invariant the database can show: accepted stock writes
// carry non-decreasing fencing tokens.
const L2 = "L2"

// verdict is the judgement of one run: the database audit, the client
// records' checks and the lock checks, with the figures a report prints.
type Verdict struct {
	Audit      audit.Report      `json:"audit"`
	Client     []audit.Violation `json:"client_violations"`
	Locks      []audit.Violation `json:"lock_violations"`
	Counts     Counts            `json:"counts"`
	Violations []audit.Violation `json:"-"` // all of the above, in one list
	// Linearizable is the clients' histories' verdict (nil: unknown, or
	// not checked); Linear its details.
	Linearizable *bool                 `json:"linearizable"`
	Linear       *loadgen.LinearReport `json:"linearizability,omitempty"`
}

// counts are a run's headline numbers, from the database.
type Counts struct {
	Orders     int64 `json:"orders"`     // orders not cancelled (rows)
	Held       int64 `json:"held"`       // units held by orders not cancelled
	Cancelled  int64 `json:"cancelled"`  // orders cancelled
	Paid       int64 `json:"paid"`       // orders paid
	Added      int64 `json:"added"`      // units created + restocked
	StockLeft  int64 `json:"stock_left"` // sum of products.stock and their stock buckets
	Oversold   int64 `json:"oversold"`   // units held by orders beyond what was added
	Duplicates int64 `json:"duplicates"` // orders beyond one per (user, product) seckill or (user, key) regular
	LostAcks   int   `json:"lost_acks"`  // 2xx whose order the database does not have
	// AcceptedLost: 202s (queued mode) that ended neither as an order nor
	// as a rejection (O3q).
	AcceptedLost int   `json:"accepted_lost"`
	Undersold    int   `json:"undersold"`   // refusals for lack of stock while stock was provably left
	StaleFence   int64 `json:"stale_fence"` // accepted writes with a fence older than one accepted before
}

// OK reports a run with no violation at all.
func (v Verdict) OK() bool { return len(v.Violations) == 0 }

// invariants lists the distinct invariants violated, in order.
func (v Verdict) Invariants() []string {
	var out []string
	for _, x := range v.Violations {
		if !slices.Contains(out, x.Invariant) {
			out = append(out, x.Invariant)
		}
	}
	return out
}

// checkInput is what a run leaves to judge.
type CheckInput struct {
	Records  []loadgen.Record
	Products map[int64]int64 // product -> units it was created with
	Settled  bool            // pay run: every order must end paid or cancelled
	Wallets  map[int64]int64 // balances read by the clients (pay run), nil otherwise
	Mirror   func(ctx context.Context, productID int64) (units, held int64, ok bool, err error)
	Linear   *loadgen.LinearOptions // nil: no linearizability check
	SoldOut  time.Duration          // the shops' SHOP_SOLD_OUT_CACHE (O5, as linear's)
}

// checkLinear judges the records' linearizability (when asked) and adds a
// LIN violation per product that is not linearizable.
func (v *Verdict) checkLinear(in CheckInput, f loadgen.Facts) {
	if in.Linear == nil {
		return
	}
	rep, vs := loadgen.CheckLinear(in.Records, in.Products, f, *in.Linear)
	v.Linear, v.Linearizable = &rep, rep.Linearizable
	v.Client = append(v.Client, vs...)
}

// verifyDB judges a run from the database: audit.Check (I1-I4, O1-O2,
// M1-M2, R1 with a mirror), the client records (O3-O5, money), and L2.
func DB(ctx context.Context, db *gorm.DB, in CheckInput) (Verdict, error) {
	var v Verdict
	r, err := audit.Check(ctx, db, audit.Options{StockMirror: in.Mirror})
	if err != nil {
		return v, err
	}
	v.Audit = r
	f, err := dbFacts(ctx, db, in)
	if err != nil {
		return v, err
	}
	f.SoldOutCache = in.SoldOut
	v.Client = loadgen.Check(in.Records, f)
	v.checkLinear(in, f)
	v.Locks, v.Counts.StaleFence, err = fenceCheck(ctx, db)
	if err != nil {
		return v, err
	}
	if err := v.count(ctx, db, in, f); err != nil {
		return v, err
	}
	v.Violations = append(append(append([]audit.Violation{}, r.Violations...), v.Client...), v.Locks...)
	return v, nil
}

// verifyAPI judges a run on shops reached only over HTTP (--target): the
// audit route per product the run created (and for wallets, everything,
// keeping the violations of the run's users), and the client records with
// facts read through the API.
func API(ctx context.Context, c *loadgen.Client, in CheckInput, tokens map[int64]string) (Verdict, error) {
	var v Verdict
	v.Audit = audit.Report{OK: true, Products: []audit.ProductSummary{}, Violations: []audit.Violation{}}
	for id := range in.Products {
		r, err := c.Audit(ctx, id)
		if err != nil {
			return v, err
		}
		v.Audit.CheckedAt = r.CheckedAt
		v.Audit.Products = append(v.Audit.Products, r.Products...)
		v.Audit.Violations = append(v.Audit.Violations, r.Violations...)
	}
	if in.Wallets != nil {
		r, err := c.Audit(ctx, 0)
		if err != nil {
			return v, err
		}
		for _, x := range r.Violations {
			if _, ours := tokens[x.UserID]; ours && x.ProductID == 0 {
				v.Audit.Violations = append(v.Audit.Violations, x)
			}
		}
		for _, w := range r.Wallets {
			if _, ours := tokens[w.UserID]; ours {
				v.Audit.Wallets = append(v.Audit.Wallets, w)
			}
		}
	}
	v.Audit.OK = len(v.Audit.Violations) == 0
	f, err := loadgen.FactsFromAPI(ctx, c, in.Records, tokens, in.Products)
	if err != nil {
		return v, err
	}
	f.Settled, f.Wallets, f.SoldOutCache = in.Settled, in.Wallets, in.SoldOut
	v.Client = loadgen.Check(in.Records, f)
	v.checkLinear(in, f)
	for _, p := range v.Audit.Products {
		v.Counts.Added += p.Added
		v.Counts.StockLeft += p.Stock
		v.Counts.Held += p.Sold - p.Cancelled
		v.Counts.Oversold += p.Oversold()
	}
	for _, o := range f.Orders {
		switch o.Status {
		case "cancelled":
			v.Counts.Cancelled++
		case "paid":
			v.Counts.Paid++
			v.Counts.Orders++
		default:
			v.Counts.Orders++
		}
	}
	v.Counts.LostAcks, v.Counts.Undersold, v.Counts.AcceptedLost = countClient(v.Client)
	for _, x := range v.Audit.Violations {
		if x.Invariant == audit.O1 || x.Invariant == audit.O2 {
			v.Counts.Duplicates += int64(len(x.Rows))
		}
	}
	v.Violations = append(append([]audit.Violation{}, v.Audit.Violations...), v.Client...)
	return v, nil
}

func countClient(vs []audit.Violation) (lost, undersold, acceptedLost int) {
	for _, x := range vs {
		var n int
		fmt.Sscanf(lastNumber(x.Detail), "%d", &n)
		switch x.Invariant {
		case loadgen.O3:
			lost += n
		case loadgen.O5:
			undersold += n
		case loadgen.O3q:
			acceptedLost += n
		}
	}
	return lost, undersold, acceptedLost
}

// lastNumber returns the digits at the end of s ("...: 12" -> "12").
func lastNumber(s string) string {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return s[i:]
}

type orderFactRow struct {
	OrderNo     string `gorm:"column:order_no"`
	UserID      int64  `gorm:"column:user_id"`
	ProductID   int64  `gorm:"column:product_id"`
	Quantity    int64  `gorm:"column:quantity"`
	AmountCents int64  `gorm:"column:amount_cents"`
	Kind        string `gorm:"column:kind"`
	Status      string `gorm:"column:status"`
}

// dbFacts reads what the client checks need: the orders the records name
// and every order of the run's users, each product's stock, and when units
// came back (cancel and restock ledger rows).
func dbFacts(ctx context.Context, db *gorm.DB, in CheckInput) (loadgen.Facts, error) {
	f := loadgen.Facts{Orders: map[string]loadgen.OrderFact{}, Stock: map[int64]loadgen.StockFact{}, Settled: in.Settled, Wallets: in.Wallets}
	db = db.WithContext(ctx)
	add := func(rows []orderFactRow) {
		for _, o := range rows {
			f.Orders[o.OrderNo] = loadgen.OrderFact{OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID,
				Quantity: o.Quantity, AmountCents: o.AmountCents, Kind: o.Kind, Status: o.Status}
		}
	}
	const cols = "order_no, user_id, product_id, quantity, amount_cents, kind, status"
	nos := loadgen.OrderNumbers(in.Records)
	rejected, err := rejectedOf(db, nos)
	if err != nil {
		return f, err
	}
	f.Rejected = rejected
	for len(nos) > 0 {
		n := min(len(nos), 500)
		var rows []orderFactRow
		if err := db.Raw("SELECT "+cols+" FROM orders WHERE order_no IN ?", nos[:n]).Scan(&rows).Error; err != nil {
			return f, err
		}
		add(rows)
		nos = nos[n:]
	}
	// Every order of the users whose wallets are checked, and of those
	// answered outcome_unknown (A3: a seckill answer names no order).
	users := loadgen.DoubtUsers(in.Records)
	for u := range in.Wallets {
		users = append(users, u)
	}
	for len(users) > 0 {
		n := min(len(users), 500)
		var rows []orderFactRow
		if err := db.Raw("SELECT "+cols+" FROM orders WHERE user_id IN ?", users[:n]).Scan(&rows).Error; err != nil {
			return f, err
		}
		add(rows)
		users = users[n:]
	}
	for id := range in.Products {
		// The ledger's sum, not products.stock: the two agree on a sound
		// shop (I3), and when a lost update overwrote the stock the ledger
		// still says what was sold.
		var stock int64
		if err := db.Raw("SELECT COALESCE(SUM(delta), 0) FROM stock_ledger WHERE product_id = ?", id).Scan(&stock).Error; err != nil {
			return f, err
		}
		var adds []struct {
			Delta     int64     `gorm:"column:delta"`
			CreatedAt time.Time `gorm:"column:created_at"`
		}
		if err := db.Raw("SELECT delta, created_at FROM stock_ledger WHERE product_id = ? AND reason IN ('restock', 'cancel') AND delta > 0", id).
			Scan(&adds).Error; err != nil {
			return f, err
		}
		s := loadgen.StockFact{Final: stock}
		for _, a := range adds {
			s.Additions = append(s.Additions, loadgen.Addition{At: a.CreatedAt, Units: a.Delta})
		}
		f.Stock[id] = s
	}
	return f, nil
}

// fenceCheck is L2 as the database shows it: the `order` ledger rows of a
// product's stock bucket (one lock key, one fence counter; a product not
// held in buckets has only bucket 0), in the order they were written (their
// ids: each was written while its transaction held the bucket's row), carry
// non-decreasing fencing tokens. A row with a token older than one accepted
// before it is a write by a holder whose lease had already passed to
// someone else.
func fenceCheck(ctx context.Context, db *gorm.DB) ([]audit.Violation, int64, error) {
	var rows []struct {
		ID        int64  `gorm:"column:id"`
		ProductID int64  `gorm:"column:product_id"`
		Bucket    int    `gorm:"column:bucket"`
		Fence     int64  `gorm:"column:fence"`
		OrderNo   string `gorm:"column:order_no"`
	}
	if err := db.WithContext(ctx).Raw("SELECT id, product_id, bucket, fence, order_no FROM stock_ledger WHERE reason = 'order' AND fence > 0 ORDER BY product_id, bucket, id").
		Scan(&rows).Error; err != nil {
		return nil, 0, err
	}
	byProduct := map[int64]*audit.Violation{}
	var order []int64
	var stale int64
	var last, lastID, product int64
	bucket := -1
	for _, r := range rows {
		if r.ProductID != product || r.Bucket != bucket {
			product, bucket, last, lastID = r.ProductID, r.Bucket, 0, 0
		}
		if r.Fence < last {
			stale++
			v := byProduct[r.ProductID]
			if v == nil {
				v = &audit.Violation{Invariant: L2, ProductID: r.ProductID}
				byProduct[r.ProductID] = v
				order = append(order, r.ProductID)
			}
			if len(v.Rows) < 20 {
				v.Rows = append(v.Rows, map[string]any{"ledger_id": r.ID, "order_no": r.OrderNo, "bucket": r.Bucket, "fence": r.Fence,
					"after_ledger_id": lastID, "after_fence": last})
			}
			continue
		}
		last, lastID = r.Fence, r.ID
	}
	out := make([]audit.Violation, 0, len(order))
	for _, id := range order {
		v := byProduct[id]
		v.Detail = fmt.Sprintf("stock writes accepted with a fencing token older than one the database had already accepted (a lock holder past its lease made its write count): %d", len(v.Rows))
		out = append(out, *v)
	}
	return out, stale, nil
}

// count fills the headline figures from the database.
func (v *Verdict) count(ctx context.Context, db *gorm.DB, in CheckInput, f loadgen.Facts) error {
	for _, p := range v.Audit.Products {
		if _, ours := in.Products[p.ProductID]; !ours {
			continue
		}
		v.Counts.Added += p.Added
		v.Counts.StockLeft += p.Stock
		v.Counts.Held += p.Sold - p.Cancelled
		v.Counts.Oversold += p.Oversold()
	}
	var dup struct {
		N int64 `gorm:"column:n"`
	}
	err := db.WithContext(ctx).Raw(`SELECT
 (SELECT COUNT(*) FROM orders WHERE kind = 'seckill') - (SELECT COUNT(*) FROM (SELECT DISTINCT user_id, product_id FROM orders WHERE kind = 'seckill') s)
 + (SELECT COUNT(*) FROM orders WHERE kind = 'regular' AND idem_key IS NOT NULL) - (SELECT COUNT(*) FROM (SELECT DISTINCT user_id, idem_key FROM orders WHERE kind = 'regular' AND idem_key IS NOT NULL) r) AS n`).
		Scan(&dup).Error
	if err != nil {
		return err
	}
	v.Counts.Duplicates = dup.N
	var st struct {
		Orders    int64 `gorm:"column:orders"`
		Cancelled int64 `gorm:"column:cancelled"`
		Paid      int64 `gorm:"column:paid"`
	}
	if err := db.WithContext(ctx).Raw(`SELECT COALESCE(SUM(CASE WHEN status <> 'cancelled' THEN 1 ELSE 0 END), 0) AS orders,
 COALESCE(SUM(CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END), 0) AS cancelled,
 COALESCE(SUM(CASE WHEN status = 'paid' THEN 1 ELSE 0 END), 0) AS paid FROM orders`).Scan(&st).Error; err != nil {
		return err
	}
	v.Counts.Orders, v.Counts.Cancelled, v.Counts.Paid = st.Orders, st.Cancelled, st.Paid
	v.Counts.LostAcks, v.Counts.Undersold, v.Counts.AcceptedLost = countClient(v.Client)
	return nil
}

// auditViolation is a violation in audit's format, whoever found it.
type Violation = audit.Violation

func NewViolation(inv, detail string, rows ...map[string]any) audit.Violation {
	if rows == nil {
		rows = []map[string]any{}
	}
	return audit.Violation{Invariant: inv, Detail: detail, Rows: rows}
}

// rejectedOf reads which of the order numbers the queued mode rejected.
func rejectedOf(db *gorm.DB, nos []string) (map[string]bool, error) {
	out := map[string]bool{}
	for len(nos) > 0 {
		n := min(len(nos), 500)
		var got []string
		if err := db.Raw("SELECT order_no FROM seckill_rejections WHERE order_no IN ?", nos[:n]).Scan(&got).Error; err != nil {
			return nil, err
		}
		for _, no := range got {
			out[no] = true
		}
		nos = nos[n:]
	}
	return out, nil
}
