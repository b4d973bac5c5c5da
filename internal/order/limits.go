package order

import (
	"context"
	"errors"
	"strconv"

	"github.com/seckill-lab/shop/internal/idem"
)

// ErrUnpaidLimit: the order would take the user's unpaid units above the
// configured cap; nothing was changed.
var ErrUnpaidLimit = errors.New("too many unpaid units held; pay or cancel pending orders first")

// SeckillNo is the order number of userID's one seckill order for productID.
func SeckillNo(userID, productID int64) string {
	return idem.OrderNo("S", strconv.FormatInt(userID, 10), strconv.FormatInt(productID, 10))
}

// RegularNo is the order number of userID's regular order under a business
// key (see Regular).
func RegularNo(userID int64, key string) string {
	return idem.OrderNo("R", strconv.FormatInt(userID, 10), key)
}

// UnpaidUnits is how many units the user holds in pending orders.
func (s *Service) UnpaidUnits(ctx context.Context, userID int64) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&Order{}).Where("user_id = ? AND status = ?", userID, StatusPending).
		Select("COALESCE(SUM(quantity), 0)").Scan(&n).Error
	return n, err
}

// CheckUnpaid refuses (ErrUnpaidLimit) an order of quantity units that would
// take the user's pending units above limit, unless the order orderNo
// already exists: a repeat is answered with its order, not refused. limit
// <= 0 turns the cap off.
//
// The cap is soft under concurrency: it is read before the order is made,
// outside the product lock, so simultaneous first requests of one user for
// different products may each pass and end a few units above it. Holding
// stock hostage takes many orders, which the per-user rate limit slows; the
// cap bounds what a patient user holds.
func (s *Service) CheckUnpaid(ctx context.Context, userID, quantity, limit int64, orderNo string) error {
	if limit <= 0 {
		return nil
	}
	held, err := s.UnpaidUnits(ctx, userID)
	if err != nil || held+quantity <= limit {
		return err
	}
	if _, err := s.Get(ctx, userID, orderNo); err == nil {
		return nil
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	return ErrUnpaidLimit
}
