package order

import (
	"context"
	"strconv"
	"time"

	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/ride"
)

func markerKey(userID, productID int64) string {
	return "seckill:" + strconv.FormatInt(userID, 10) + ":" + strconv.FormatInt(productID, 10)
}

// Seckill places the user's one flash-sale order for productID. A repeat, in
// any interleaving, returns the first order with created false. It is the
// two halves below, one after the other; the HTTP handler calls them itself,
// to rate limit between them what the check did not answer.
func (s *Service) Seckill(ctx context.Context, userID, productID int64) (Order, bool, error) {
	return s.PlaceSeckill(ctx, s.CheckSeckill(ctx, userID, productID))
}

// SeckillCheck is a seckill request and what its check, asked once, up
// front, found: what inventory knows of the product (its sold-out book, and
// whether its wants share a lock hold), and, for a product sold out, the
// answer of the buyer lists.
type SeckillCheck struct {
	userID, productID int64
	inv               inventory.Check
	answered          bool // o, err are the request's answer
	o                 Order
	err               error
	// marker is the processed-marker read, built for a product not sold
	// out, riding along (its ride) with the rate limiter's trip when the
	// handler makes one with Along's context.
	marker idem.MarkerRead
	ride   *ride.Ride
}

// Along returns ctx carrying the request's processed-marker read: a Redis
// call made with it that shares round trips (the rate limiter's) takes the
// read into its own trip, and PlaceSeckill reads the marker from there
// instead of making a trip of its own. Without such a call, PlaceSeckill
// reads the marker itself.
func (c SeckillCheck) Along(ctx context.Context) context.Context { return ride.With(ctx, c.ride) }

// SoldOut reports whether the check found the product sold out here: the
// request is answered from memory (409 sold_out, or the buyer's order),
// cheap, so it is not rate limited.
func (c SeckillCheck) SoldOut() bool { return c.inv.SoldOut }

// CheckSeckill is the first half of Seckill: inventory's check, asked once;
// for a product sold out, the buyer lists answer (buyers.go), or, when its
// buyers could not be read, leaves the request to PlaceSeckill.
func (s *Service) CheckSeckill(ctx context.Context, userID, productID int64) SeckillCheck {
	c := SeckillCheck{userID: userID, productID: productID, inv: s.inv.Check(ctx, productID)}
	switch {
	case s.cfg.NoIdempotency:
	case c.inv.SoldOut:
		c.o, c.answered, c.err = s.fromBook(ctx, userID, productID, c.inv.Version)
	default:
		c.marker = s.markers.Prepare(ctx, markerKey(userID, productID))
		c.ride = ride.New(c.marker.Cmd())
	}
	return c
}

// PlaceSeckill is the second half of Seckill, for a request its check did
// not answer. Check, lock, check again, one transaction: the processed
// marker (Redis), then the
// batch (place): the product lock, the batch's own check of the order
// numbers (the database, the one that decides), one transaction, the
// answer, the release.
func (s *Service) PlaceSeckill(ctx context.Context, c SeckillCheck) (Order, bool, error) {
	if c.answered {
		return c.o, false, c.err
	}
	userID, productID := c.userID, c.productID
	no := SeckillNo(userID, productID)
	if s.cfg.NoIdempotency {
		no = randomNo("S")
	} else if o, ok := s.fromMarker(ctx, c); ok {
		return o, false, nil
	}
	o, created, err := s.place(ctx, Order{OrderNo: no, UserID: userID, ProductID: productID, Quantity: 1, Kind: KindSeckill}, c.inv.Locks)
	if err != nil && !s.cfg.NoIdempotency {
		// The batch failed (lock busy, Redis or the database could not
		// answer), or the gate (redis-gate) refused it (a repeat whose
		// marker Redis lost): a buyer's repeat still gets its order, by
		// one point read on the unique index. Once the sold-out book knows
		// the product, refusals stop coming here. The read may outlive the
		// request's deadline (a busy answer is often that deadline), but
		// briefly: the client is owed its answer.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fallbackReadTimeout)
		prev, err2 := s.byNo(rctx, no)
		cancel()
		if err2 == nil {
			s.metrics.replayed(KindSeckill)
			return prev, false, nil
		}
	}
	return o, created, err
}

// fallbackReadTimeout bounds Seckill's look-up of a repeat's order after its
// batch failed.
const fallbackReadTimeout = 500 * time.Millisecond

// fromMarker answers a repeat whose processed marker is in Redis, read on
// the check's ride or, when it did not travel, now, with a read of its own
// (not the ride's command: a ride taken and not answered may still be
// written by its taker). A marker that cannot be read is no answer: the
// batch's own check decides.
func (s *Service) fromMarker(ctx context.Context, c SeckillCheck) (Order, bool) {
	var v string
	var ok bool
	var err error
	if c.ride.Replied() {
		v, ok, err = c.marker.Result()
	} else {
		v, ok, err = s.markers.Get(ctx, markerKey(c.userID, c.productID))
	}
	if err != nil || !ok {
		return Order{}, false
	}
	o, err := s.byNo(ctx, v)
	if err != nil {
		return Order{}, false
	}
	s.metrics.replayed(KindSeckill)
	return o, true
}

// markAll writes the processed markers of a batch's seckill orders in one
// round trip, after the commit and the release.
func (s *Service) markAll(res []result) {
	if s.cfg.NoIdempotency {
		return
	}
	marks := make(map[string]string, len(res))
	for _, r := range res {
		if r.err == nil && r.o.Kind == KindSeckill {
			marks[markerKey(r.o.UserID, r.o.ProductID)] = r.o.OrderNo
		}
	}
	if err := s.markers.MarkAll(s.bg, marks); err != nil {
		s.log.Warn("processed markers not written (the unique order number still guards)", "err", err)
	}
}
