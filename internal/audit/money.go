package audit

import (
	"fmt"
	"sort"
)

type walletRow struct {
	UserID  int64 `gorm:"column:user_id"`
	Balance int64 `gorm:"column:balance_cents"`
}

type walletAgg struct {
	UserID   int64 `gorm:"column:uid"`
	Total    int64 `gorm:"column:total"`
	Credited int64 `gorm:"column:credited"`
	Paid     int64 `gorm:"column:paid"`
	Debits   int64 `gorm:"column:debits"` // payment rows
}

type paymentRow struct {
	ID          int64  `gorm:"column:id"`
	RequestID   string `gorm:"column:request_id"`
	OrderNo     string `gorm:"column:order_no"`
	UserID      int64  `gorm:"column:user_id"`
	AmountCents int64  `gorm:"column:amount_cents"`
}

func (p paymentRow) row() map[string]any {
	return map[string]any{
		"payment_id": p.ID, "request_id": p.RequestID, "order_no": p.OrderNo,
		"user_id": p.UserID, "amount_cents": p.AmountCents,
	}
}

const paymentCols = "p.id, p.request_id, p.order_no, p.user_id, p.amount_cents"

// orderPaymentRow is an order with its payment, if any.
type orderPaymentRow struct {
	Order         orderRow `gorm:"embedded"`
	PaymentID     *int64   `gorm:"column:payment_id"`
	RequestID     *string  `gorm:"column:request_id"`
	PaymentUserID *int64   `gorm:"column:payment_user_id"`
	PaymentCents  *int64   `gorm:"column:payment_cents"`
}

// paymentLedgerRow is a payment with its wallet debit, if any.
type paymentLedgerRow struct {
	Payment      paymentRow `gorm:"embedded"`
	LedgerID     *int64     `gorm:"column:ledger_id"`
	LedgerUserID *int64     `gorm:"column:ledger_user_id"`
	LedgerDelta  *int64     `gorm:"column:ledger_delta"`
}

type walletLedgerRow struct {
	ID     int64  `gorm:"column:id"`
	UserID int64  `gorm:"column:user_id"`
	Delta  int64  `gorm:"column:delta"`
	Reason string `gorm:"column:reason"`
	Ref    string `gorm:"column:ref"`
}

// M1 faults; each is a format taking the count of rows.
const (
	faultPaidTwice     = "payments of an order that another payment also charged: %d"
	faultPaidNoPayment = "paid orders without a payment row: %d"
	faultPaymentState  = "payments of orders that are %s, not paid: %%d"
	faultPaymentAmount = "payments of another amount than their order's: %d"
	faultPaymentUser   = "payments charging a user other than the order's: %d"
	faultPaymentOrphan = "payments naming no order: %d"
	faultNoDebit       = "payments without a wallet debit (no `payment` wallet ledger row): %d"
	faultBadDebit      = "payments whose wallet debit has another amount or user: %d"
	faultDebitOrphan   = "wallet debits (`payment` ledger rows) without a payment row: %d"
	faultDebitTwice    = "wallet debits of an order that another debit also charged: %d"
)

const (
	// debitJoin gives each payment p its wallet debit l: the `payment` row
	// whose ref is the order number ((reason, ref) is unique).
	debitJoin = `
LEFT JOIN wallet_ledger l ON l.reason = 'payment' AND l.ref = p.order_no`
	// debitFault holds for a payment whose wallet was not debited exactly.
	debitFault = `l.id IS NULL OR l.delta <> -p.amount_cents OR l.user_id <> p.user_id`
)

// money builds the wallet summaries and checks M1 and M2. A payment's wallet
// ledger row is the `payment` row whose ref is the order number. One pass
// over the payments counts what is right; each detail query below runs only
// when the counts say something is wrong (or a unique index no longer holds).
func (c *checker) money() error {
	debits, err := c.walletBalances()
	if err != nil {
		return err
	}
	t, err := c.tallyPayments()
	if err != nil {
		return err
	}
	if t.dups {
		if err := c.paidTwice(); err != nil {
			return err
		}
	}
	if err := c.paidOrders(t); err != nil {
		return err
	}
	if err := c.orphanPayments(t); err != nil {
		return err
	}
	if err := c.badDebits(t); err != nil {
		return err
	}
	return c.strayDebits(t, debits)
}

// walletBalances builds c.wallets from the wallets and their ledger and
// checks each: balance = ledger sum (M1), neither below zero (M2). It
// returns how many `payment` debits the ledger holds.
func (c *checker) walletBalances() (debits int64, err error) {
	var wallets []walletRow
	if err := c.scan(&wallets, "SELECT user_id, balance_cents FROM wallets ORDER BY user_id"); err != nil {
		return 0, err
	}
	var ledger []walletAgg
	if err := c.scan(&ledger, `SELECT user_id + 0 AS uid,
  COALESCE(SUM(delta), 0) AS total,
  COALESCE(SUM(CASE WHEN reason = 'credit' THEN delta ELSE 0 END), 0) AS credited,
  COALESCE(SUM(CASE WHEN reason = 'payment' THEN -delta ELSE 0 END), 0) AS paid,
  COALESCE(SUM(CASE WHEN reason = 'payment' THEN 1 ELSE 0 END), 0) AS debits
FROM wallet_ledger GROUP BY uid`); err != nil {
		return 0, err
	}
	byUser := make(map[int64]*WalletSummary, len(wallets))
	for _, w := range wallets {
		byUser[w.UserID] = &WalletSummary{UserID: w.UserID, Balance: w.Balance}
	}
	for _, l := range ledger {
		debits += l.Debits
		s := byUser[l.UserID]
		if s == nil {
			s = &WalletSummary{UserID: l.UserID, Missing: true}
			byUser[l.UserID] = s
		}
		s.Ledger, s.Credited, s.Paid = l.Total, l.Credited, l.Paid
	}
	c.wallets = make([]WalletSummary, 0, len(byUser))
	for _, s := range byUser {
		c.wallets = append(c.wallets, *s)
	}
	sort.Slice(c.wallets, func(i, j int) bool { return c.wallets[i].UserID < c.wallets[j].UserID })
	for _, w := range c.wallets {
		c.checkWallet(w)
	}
	return debits, nil
}

// checkWallet files one wallet's M1 (balance against ledger) and M2
// (nothing below zero) faults.
func (c *checker) checkWallet(w WalletSummary) {
	row := map[string]any{
		"user_id": w.UserID, "balance_cents": w.Balance, "ledger_cents": w.Ledger,
		"credited_cents": w.Credited, "paid_cents": w.Paid,
	}
	if w.Missing {
		row["missing"] = true
		c.out.one(M1, 0, w.UserID, fmt.Sprintf("wallet ledger rows sum to %d cents for a user with no wallet", w.Ledger), row)
	} else if w.Balance != w.Ledger {
		c.out.one(M1, 0, w.UserID, fmt.Sprintf("balance %d cents but the wallet ledger sums to %d (credits %d - payments %d): difference %+d",
			w.Balance, w.Ledger, w.Credited, w.Paid, w.Balance-w.Ledger), row)
	}
	if w.Balance < 0 {
		c.out.one(M2, 0, w.UserID, fmt.Sprintf("balance is %d cents", w.Balance), row)
	}
	if w.Ledger < 0 {
		c.out.one(M2, 0, w.UserID, fmt.Sprintf("payments exceed credits by %d cents in the wallet ledger", -w.Ledger), row)
	}
}

// paymentTally is what one pass over the payments counted.
type paymentTally struct {
	dups       bool            // an order paid or debited twice: the unique indexes no longer hold
	orphans    int64           // payments naming no order
	badDebits  int64           // payments whose wallet debit is missing or wrong
	debited    int64           // payments with a debit
	good, paid map[int64]int64 // by product: payments that are right, all payments
}

// tallyPayments is one pass over payments, each with its order and its
// debit, counting the payments that are right; the unique indexes on
// payments.order_no and wallet_ledger (reason, ref) make counting exact, and
// index-only queries prove they still hold.
func (c *checker) tallyPayments() (paymentTally, error) {
	t := paymentTally{good: map[int64]int64{}, paid: map[int64]int64{}}
	var pass []struct {
		OrderProduct *int64 `gorm:"column:opid"`
		N            int64  `gorm:"column:n"`
		Good         int64  `gorm:"column:good"` // paid order, same amount and user
		Debited      int64  `gorm:"column:debited"`
		BadDebits    int64  `gorm:"column:bad_debits"`
	}
	if err := c.scan(&pass, `SELECT o.product_id + 0 AS opid, COUNT(*) AS n,
  COALESCE(SUM(CASE WHEN o.status = 'paid' AND p.amount_cents = o.amount_cents AND p.user_id = o.user_id THEN 1 ELSE 0 END), 0) AS good,
  COALESCE(SUM(CASE WHEN l.id IS NOT NULL THEN 1 ELSE 0 END), 0) AS debited,
  COALESCE(SUM(CASE WHEN `+debitFault+` THEN 1 ELSE 0 END), 0) AS bad_debits
FROM payments p LEFT JOIN orders o ON o.order_no = p.order_no`+debitJoin+`
GROUP BY opid`); err != nil {
		return t, err
	}
	var twice, debitedTwice []string
	if err := c.scan(&twice, "SELECT order_no FROM payments GROUP BY order_no HAVING COUNT(*) > 1"); err != nil {
		return t, err
	}
	if err := c.scan(&debitedTwice, "SELECT ref FROM wallet_ledger WHERE reason = 'payment' GROUP BY ref HAVING COUNT(*) > 1"); err != nil {
		return t, err
	}
	t.dups = len(twice) > 0 || len(debitedTwice) > 0
	for _, p := range pass {
		t.debited += p.Debited
		t.badDebits += p.BadDebits
		if p.OrderProduct == nil {
			t.orphans += p.N
			continue
		}
		t.good[*p.OrderProduct] += p.Good
		t.paid[*p.OrderProduct] += p.N
	}
	return t, nil
}

// paidOrders: every paid order needs one good payment and every payment a
// paid order. The products whose counts disagree are searched in detail.
func (c *checker) paidOrders(t paymentTally) error {
	var ids []int64
	for _, o := range c.orderAggs {
		if t.dups || t.good[o.ProductID] != o.PaidOrders || t.paid[o.ProductID] != o.PaidOrders {
			ids = append(ids, o.ProductID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var ops []orderPaymentRow
	if err := c.scan(&ops, `SELECT `+orderCols+`,
  p.id AS payment_id, p.request_id, p.user_id AS payment_user_id, p.amount_cents AS payment_cents
FROM orders o`+paymentJoin+`
WHERE o.product_id IN ? AND (`+m1Fault+`)
ORDER BY o.user_id, o.id`, ids); err != nil {
		return err
	}
	for _, r := range ops {
		c.m1Order(r)
	}
	return nil
}

// orphanPayments lists payments that name no order.
func (c *checker) orphanPayments(t paymentTally) error {
	if !t.dups && t.orphans == 0 {
		return nil
	}
	var rows []paymentRow
	if err := c.scan(&rows, `SELECT `+paymentCols+`
FROM payments p LEFT JOIN orders o ON o.order_no = p.order_no
WHERE o.id IS NULL ORDER BY p.user_id, p.id`); err != nil {
		return err
	}
	for _, p := range rows {
		c.out.add(bucketKey{invariant: M1, userID: p.UserID, fault: faultPaymentOrphan}, 0, p.row())
	}
	return nil
}

// badDebits lists payments whose wallet debit is missing or has another
// amount or user.
func (c *checker) badDebits(t paymentTally) error {
	if !t.dups && t.badDebits == 0 {
		return nil
	}
	var rows []paymentLedgerRow
	if err := c.scan(&rows, `SELECT `+paymentCols+`,
  l.id AS ledger_id, l.user_id AS ledger_user_id, l.delta AS ledger_delta
FROM payments p`+debitJoin+`
WHERE `+debitFault+`
ORDER BY p.user_id, p.id`); err != nil {
		return err
	}
	for _, d := range rows {
		m := d.Payment.row()
		m["ledger_id"], m["ledger_user_id"], m["ledger_delta"] = d.LedgerID, d.LedgerUserID, d.LedgerDelta
		fault := faultBadDebit
		if d.LedgerID == nil {
			fault = faultNoDebit
		}
		c.out.add(bucketKey{invariant: M1, userID: d.Payment.UserID, fault: fault}, 0, m)
	}
	return nil
}

// strayDebits lists `payment` debits that name no payment. Every debit
// naming a payment was counted by the pass, so those naming none are the
// difference between the ledger's debits and the pass's.
func (c *checker) strayDebits(t paymentTally, debits int64) error {
	if !t.dups && t.debited == debits {
		return nil
	}
	var stray []walletLedgerRow
	if err := c.scan(&stray, `SELECT l.id, l.user_id, l.delta, l.reason, l.ref
FROM wallet_ledger l LEFT JOIN payments p ON p.order_no = l.ref
WHERE l.reason = 'payment' AND p.id IS NULL ORDER BY l.user_id, l.id`); err != nil {
		return err
	}
	for _, l := range stray {
		c.out.add(bucketKey{invariant: M1, userID: l.UserID, fault: faultDebitOrphan}, 0, map[string]any{
			"ledger_id": l.ID, "user_id": l.UserID, "delta": l.Delta, "reason": l.Reason, "ref": l.Ref,
		})
	}
	return nil
}

// m1Order files one order of the M1 detail query under its faults.
func (c *checker) m1Order(r orderPaymentRow) {
	o := r.Order
	m := o.row()
	m["payment_id"], m["request_id"], m["payment_user_id"], m["payment_cents"] = r.PaymentID, r.RequestID, r.PaymentUserID, r.PaymentCents
	add := func(user int64, fault string) {
		c.out.add(bucketKey{invariant: M1, userID: user, fault: fault}, 0, m)
	}
	if r.PaymentID == nil {
		add(o.UserID, faultPaidNoPayment)
		return
	}
	if o.Status != "paid" {
		add(*r.PaymentUserID, fmt.Sprintf(faultPaymentState, o.Status))
	}
	if *r.PaymentCents != o.AmountCents {
		add(*r.PaymentUserID, faultPaymentAmount)
	}
	if *r.PaymentUserID != o.UserID {
		add(*r.PaymentUserID, faultPaymentUser)
	}
}

// paidTwice lists orders with more than one payment or more than one debit.
func (c *checker) paidTwice() error {
	var twice []paymentRow
	if err := c.scan(&twice, `SELECT `+paymentCols+`
FROM payments p JOIN (SELECT order_no FROM payments GROUP BY order_no HAVING COUNT(*) > 1) d ON d.order_no = p.order_no
ORDER BY p.user_id, p.order_no, p.id`); err != nil {
		return err
	}
	for _, p := range twice {
		c.out.add(bucketKey{invariant: M1, userID: p.UserID, fault: faultPaidTwice}, 0, p.row())
	}
	var debits []walletLedgerRow
	if err := c.scan(&debits, `SELECT l.id, l.user_id, l.delta, l.reason, l.ref
FROM wallet_ledger l JOIN (
  SELECT ref FROM wallet_ledger WHERE reason = 'payment' GROUP BY ref HAVING COUNT(*) > 1
) d ON d.ref = l.ref
WHERE l.reason = 'payment' ORDER BY l.user_id, l.ref, l.id`); err != nil {
		return err
	}
	for _, l := range debits {
		c.out.add(bucketKey{invariant: M1, userID: l.UserID, fault: faultDebitTwice}, 0, map[string]any{
			"ledger_id": l.ID, "user_id": l.UserID, "delta": l.Delta, "reason": l.Reason, "ref": l.Ref,
		})
	}
	return nil
}
