package payment_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/payment"
)

// TestPayOneRetryLayer: a payment whose transaction the database keeps
// picking as a deadlock victim is tried at most 5 times under its account
// lock and then answered unavailable (the deadlock itself, as docs/api.md
// says of 1213 after retries); dbx.Tx's own reruns must not nest inside
// payment's loop (5 x 5 = 25 transactions before; issue 11 item 14).
func TestPayOneRetryLayer(t *testing.T) {
	t.Parallel()
	s := newShop(t, payment.Config{})
	const user = 21
	p := s.product(100, 10)
	s.credit(user, 500)
	o := s.order(user, p.ID)

	var attempts atomic.Int64
	const name = "test:deadlock-payments"
	err := s.db.Callback().Create().Before("gorm:create").Register(name, func(db *gorm.DB) {
		if db.Statement.Table == "payments" {
			attempts.Add(1)
			_ = db.AddError(&mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock (injected)"})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: "k", RequestHash: "h"})
	if err := s.db.Callback().Create().Remove(name); err != nil {
		t.Fatal(err)
	}
	if errors.Is(err, payment.ErrBusy) || !dbx.Retryable(err) {
		t.Errorf("a payment that always deadlocks: %v, want the deadlock itself (503 unavailable, docs/api.md), not ErrBusy", err)
	}
	if n := attempts.Load(); n != 5 {
		t.Errorf("%d transactions for one payment, want 5 (one retry layer)", n)
	}
	if b := s.balance(user); b != 500 || s.count("SELECT COUNT(*) FROM payments") != 0 {
		t.Errorf("a payment that never committed changed the balance to %d", b)
	}
	// The same request goes through once the database lets it.
	if _, err := s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: "k", RequestHash: "h"}); err != nil {
		t.Errorf("the retry: %v", err)
	}
}
