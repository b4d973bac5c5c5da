package order

import (
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
)

// commitTx is one batch's transaction: the batch's own check of its order
// numbers, the unpaid cap, the deduction under d's hold and the orders. It
// fills res and returns what the deduction took (zero: it ran none).
func (s *Service) commitTx(tx *gorm.DB, d *inventory.Deduction, batch []*request, res []result) (taken inventory.Taken, err error) {
	first, nos := firstOfEach(batch, res)
	var found []Order
	if err := tx.Where("order_no IN ?", nos).Find(&found).Error; err != nil {
		return taken, err
	}
	existing := make(map[string]Order, len(found))
	for _, o := range found {
		existing[o.OrderNo] = o
	}
	wants, asked := wantsOf(batch, first, existing, res)
	wants, asked, err = s.capUnpaid(tx, batch, wants, asked, res)
	if err != nil {
		return taken, err
	}
	if len(wants) > 0 {
		if taken, err = d.DeductTx(tx, wants); err != nil {
			return inventory.Taken{}, err
		}
		if err := s.insert(tx, batch, asked, taken, res); err != nil {
			return inventory.Taken{}, err
		}
	}
	answerRepeats(batch, first, res)
	return taken, nil
}

// firstOfEach maps each order number still open in the batch to its first
// request, and lists the numbers.
func firstOfEach(batch []*request, res []result) (first map[string]int, nos []string) {
	first = make(map[string]int, len(batch))
	nos = make([]string, 0, len(batch))
	for i, r := range batch {
		if !res[i].open() {
			continue // decided by an earlier bucket's transaction
		}
		if _, ok := first[r.o.OrderNo]; !ok {
			first[r.o.OrderNo] = i
			nos = append(nos, r.o.OrderNo)
		}
	}
	return first, nos
}

// wantsOf is the wants of the first requests of each order number, with
// the batch index of each (asked); one whose order exists is answered from
// it.
func wantsOf(batch []*request, first map[string]int, existing map[string]Order, res []result) (wants []inventory.Want, asked []int) {
	for i, r := range batch {
		if j, ok := first[r.o.OrderNo]; !ok || j != i {
			continue
		}
		if o, ok := existing[r.o.OrderNo]; ok {
			res[i] = repeat(o, r.o.RequestHash)
			continue
		}
		wants = append(wants, inventory.Want{OrderNo: r.o.OrderNo, Quantity: r.o.Quantity})
		asked = append(asked, i)
	}
	return wants, asked
}

// answerRepeats answers the requests that repeat an earlier one of the
// batch as that one was answered.
func answerRepeats(batch []*request, first map[string]int, res []result) {
	for i, r := range batch {
		if j, ok := first[r.o.OrderNo]; ok && j != i {
			res[i] = sameAs(res[j], r.o.RequestHash)
		}
	}
}

// capUnpaid refuses (ErrUnpaidLimit) the wants that would take their
// user's units in pending orders above Config.UnpaidLimit, counting earlier
// wants of the same batch; one grouped read for the whole batch. For a
// product held in one row it is exact for this product (the batch holds its
// lock). For a product held in K buckets it is exact per bucket lock only:
// batches holding different buckets at once (at most K) each count the
// pending orders committed before they read, so one user's orders that
// reach them at the same moment may each pass, the cap exceeded by what at
// most K-1 concurrent batches let through (each at most the cap). Across
// products it is soft: simultaneous orders of one user for different
// products may each pass and end a few units above the cap (the per-user
// rate limit slows both down).
func (s *Service) capUnpaid(tx *gorm.DB, batch []*request, wants []inventory.Want, asked []int, res []result) ([]inventory.Want, []int, error) {
	if s.cfg.UnpaidLimit <= 0 || len(wants) == 0 {
		return wants, asked, nil
	}
	users := make([]int64, 0, len(asked))
	for _, i := range asked {
		users = append(users, batch[i].o.UserID)
	}
	var rows []struct {
		UserID int64
		Held   int64
	}
	if err := tx.Model(&Order{}).Select("user_id, COALESCE(SUM(quantity), 0) AS held").
		Where("user_id IN ? AND status = ?", users, StatusPending).Group("user_id").Scan(&rows).Error; err != nil {
		return nil, nil, err
	}
	held := make(map[int64]int64, len(rows))
	for _, r := range rows {
		held[r.UserID] = r.Held
	}
	keptWants, keptAsked := wants[:0:0], asked[:0:0]
	for k, i := range asked {
		u := batch[i].o.UserID
		if held[u]+wants[k].Quantity > s.cfg.UnpaidLimit {
			res[i] = result{err: ErrUnpaidLimit}
			continue
		}
		held[u] += wants[k].Quantity
		keptWants, keptAsked = append(keptWants, wants[k]), append(keptAsked, i)
	}
	return keptWants, keptAsked, nil
}

// insert writes the served wants' orders in one INSERT and fills their
// results; refused wants get their refusal, and wants the deduction left
// open stay open, for its next hold.
func (s *Service) insert(tx *gorm.DB, batch []*request, asked []int, taken inventory.Taken, res []result) error {
	orders := newOrders(batch, asked, taken, res)
	if err := dbx.Insert(tx, "orders", orderColumns, orderRows(orders)); err != nil {
		return err
	}
	answerCreated(asked, taken, orders, res)
	return nil
}

// orderColumns are the columns a batch writes of an order; its id is
// never read (an order is known by its number).
var orderColumns = []string{"order_no", "user_id", "product_id", "quantity", "amount_cents", "kind", "status", "version", "idem_key", "request_hash", "created_at", "updated_at"}

// orderRows are orders as rows of orderColumns.
func orderRows(orders []Order) [][]any {
	rows := make([][]any, len(orders))
	for i, o := range orders {
		rows[i] = []any{o.OrderNo, o.UserID, o.ProductID, o.Quantity, o.AmountCents, o.Kind, o.Status, o.Version, o.IdemKey, o.RequestHash, o.CreatedAt, o.UpdatedAt}
	}
	return rows
}

// newOrders is the orders of the served wants; refused wants get their
// refusal in res.
func newOrders(batch []*request, asked []int, taken inventory.Taken, res []result) []Order {
	orders := make([]Order, 0, taken.Granted())
	now := dbx.Now()
	for k, i := range asked {
		if taken.Open(k) {
			continue
		}
		if err := taken.Refused[k]; err != nil {
			res[i] = result{err: err}
			continue
		}
		o := batch[i].o
		o.AmountCents = taken.PriceCents * o.Quantity
		o.Status = StatusPending
		o.CreatedAt, o.UpdatedAt = now, now
		orders = append(orders, o)
	}
	return orders
}

// answerCreated answers the served wants with their orders, written.
func answerCreated(asked []int, taken inventory.Taken, orders []Order, res []result) {
	j := 0
	for k, i := range asked {
		if taken.Refused[k] == nil {
			res[i] = result{o: orders[j], created: true}
			j++
		}
	}
}

// repeat answers a request whose order number already has an order: the
// order (a replay), or idem.ErrFingerprintMismatch when the business key was used
// for a different request.
func repeat(o Order, hash string) result {
	if hash != "" && o.RequestHash != "" && o.RequestHash != hash {
		return result{err: idem.ErrFingerprintMismatch}
	}
	return result{o: o}
}

// sameAs answers a request that repeats an earlier one of its own batch.
func sameAs(first result, hash string) result {
	if first.err != nil {
		return result{err: first.err}
	}
	return repeat(first.o, hash)
}
