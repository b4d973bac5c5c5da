package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/order"
)

// inDoubt is an order.ErrOutcomeUnknown named for its request: the order
// number a regular order would have, or the seckill product. The 503
// outcome_unknown problem carries them (docs/api.md).
type inDoubt struct {
	err       error
	orderNo   string
	productID int64
}

func (e *inDoubt) Error() string { return e.err.Error() }
func (e *inDoubt) Unwrap() error { return e.err }

// nameInDoubt names err's request when err is an unknown outcome, and
// returns any other error as it is.
func nameInDoubt(err error, orderNo string, productID int64) error {
	if !errors.Is(err, order.ErrOutcomeUnknown) {
		return err
	}
	return &inDoubt{err: err, orderNo: orderNo, productID: productID}
}

// settleTimeout bounds how long an instance keeps asking the database
// whether an order answered outcome_unknown landed, each ask at most
// settleAsk (a silent database does not end a read); past it, the claim is
// left to its lease (SHOP_IDEM_LEASE).
const (
	settleTimeout = 30 * time.Second
	settleAsk     = 2 * time.Second
)

// settle learns, in the background, the outcome of the order numbered no
// that was answered outcome_unknown, and then calls known (frees the
// request's idempotency claim, or puts its form token back), so the
// client's retry runs and is answered by the database: the order if it
// landed, or placed once if not. Until then the claim is kept: a retry is
// 409 idempotency_key_in_use ("wait, then retry with the same key").
func (a *api) settle(no string, known func(context.Context) error) {
	go func() {
		ctx, cancel := context.WithTimeout(a.bg, settleTimeout)
		defer cancel()
		for attempt := 1; ; attempt++ {
			ask, cancelAsk := context.WithTimeout(ctx, settleAsk)
			_, err := a.orders.Landed(ask, no)
			cancelAsk()
			if err == nil {
				_ = known(ctx)
				return
			}
			silent := errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
			if !dbx.Unavailable(err) && !silent {
				return // left to the claim's lease
			}
			if !dbx.Sleep(ctx, min(time.Duration(attempt)*100*time.Millisecond, time.Second)) {
				return
			}
		}
	}()
}
