package inventory

import (
	"context"

	"gorm.io/gorm"
)

// Admission is what the gate took for one want, for the gate's tests.
type Admission struct {
	productID int64
	a         admission
}

// Admit lets one want through the gate, as a Deduction does for each of its
// wants: a refusal is the error.
func (s *Service) Admit(ctx context.Context, productID int64, orderNo string, quantity int64) (Admission, error) {
	a, refused, err := s.admit(ctx, productID, Want{OrderNo: orderNo, Quantity: quantity})
	if err == nil {
		err = refused
	}
	return Admission{productID: productID, a: a}, err
}

// Settle ends an admission, as a Deduction's Close does.
func (s *Service) Settle(ctx context.Context, a Admission, served bool) {
	s.settle(ctx, a.productID, a.a, served)
}

// PauseSeeding has f run between the gate seed's read of the product row and
// its write of the gate.
func (s *Service) PauseSeeding(f func()) { s.seeding = f }

// ErrStaleFence lets the external tests tell a write refused for its fence
// from the other refusals.
var ErrStaleFence = errStaleFence

// StrategyTableLocked reports whether the LAB strategy table is locked for
// writing (a switch in progress).
func (s *Service) StrategyTableLocked() bool {
	if s.labMu.TryRLock() {
		s.labMu.RUnlock()
		return false
	}
	return true
}

// Home is this instance's home bucket, before mod K.
func (s *Service) Home() int { return s.home }

// Take is a hold of a deduction as the tests hand it around: DeductTx
// through it keeps what the last run took, for Done.
type Take struct {
	Fence Fence // the hold's fence of bucket 0 (the product lock)
	d     *Deduction
	taken Taken
}

// Take is the hold Next took.
func (d *Deduction) Take() *Take { return &Take{Fence: d.held.fence(0), d: d} }

// Taken is what the last DeductTx through t took.
func (t *Take) Taken() Taken { return t.taken }

// DeductTx is t's Deduction's DeductTx, kept for Done.
func (s *Service) DeductTx(tx *gorm.DB, t *Take, wants []Want) (Taken, error) {
	taken, err := t.d.DeductTx(tx, wants)
	t.taken = taken
	return taken, err
}

// ErrElsewhere is the refusal of a want a bucket left open for the next.
var ErrElsewhere = errOpen

// Guard runs fn under each hold of a deduction of productID, the loop a
// batch runs (order's placeBatch), for tests that deduct without order.
// wants go through the gate (redis-gate; none: the gate is not
// touched); a refusal is the error.
func (s *Service) Guard(ctx context.Context, productID int64, wants []Want, fn func(ctx context.Context, t *Take) error) error {
	d := s.Deduct(ctx, productID, wants)
	defer d.Close()
	for _, err := range d.Refused() {
		if err != nil {
			return err
		}
	}
	for d.Next() {
		t := d.Take()
		err := fn(d.Context(), t)
		d.Done(t.Taken(), err)
	}
	return d.Err()
}
