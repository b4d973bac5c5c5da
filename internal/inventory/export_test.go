package inventory

import "context"

// Unadmitted is an admission that took nothing from the gate, for tests
// that write a want the way a batch does without touching the gate.
func (s *Service) Unadmitted(productID int64) Admission {
	a := Admission{productID: productID, strategy: s.StrategyOf(productID), buckets: 1}
	if k, err := s.bucketsOf(context.Background(), productID); err == nil && k > 1 {
		a.strategy, a.buckets = LockFence, k
	}
	return a
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

// Guard runs fn under each hold of a's deduction, the loop a batch runs
// (order's placeBatch), for tests that deduct without order.
func (s *Service) Guard(ctx context.Context, a Admission, fn func(ctx context.Context, t *Take) error) error {
	d := s.Deduct(ctx, a)
	defer d.Close()
	for d.Next() {
		d.Done(fn(d.Context(), d.Take()))
	}
	return d.Err()
}
