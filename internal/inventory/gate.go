package inventory

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
)

// The redis-gate strategy keeps a counter of admittable units in Redis and
// lets at most that many requests through to the locked path; the rest are
// turned away by one Lua call. The database's fenced conditional update
// still decides: the gate only saves work.
//
// Units taken from the gate are held under a lease, so a process that dies
// between taking them and committing cannot lose them for good. Per product
// (all keys share the product's {id} hash tag, so one script sees them all
// in Redis Cluster too):
//
//	gate:{id}         the counter of admittable units
//	gate:{id}:holds   hash: order number -> its hold record
//	gate:{id}:leases  sorted set: order number -> lease end (ms, Redis clock)
//	gate:{id}:ended   sorted set: order number -> when its ended record is forgotten
//
// A hold is per order number, not per request, because at most one order
// can ever exist per order number: concurrent requests for one number (a
// retry, a double click) share it. A live record is "L gen qty refs sold":
// units taken (the largest quantity asked), requests in flight, units sold
// (set when the one that created the order settles). When the last request
// settles, qty-sold go back to the gate. An ended record is "D" (the order
// exists: later requests for the number take nothing, they can only be
// repeats) or "R gen" (reaped: its units went back while no order existed).
//
// A lease that ends before its requests settle (the process died) is reaped
// by any instance, on a refusal and every SHOP_SWEEP_INTERVAL: the order's
// ledger row, written in the order's own transaction, says whether the
// units were sold; the rest go back. A holder that was only slow and
// commits after its hold was reaped (units given back, no order then)
// takes its units back from the gate when it settles; until then the gate
// admits too many, which the database refuses. The lease is long enough
// that this stays rare: see gateLease.
//
// Known limit: an ended "D" record is forgotten one lease after it ended.
// A request for that order number that still reaches the gate later (its
// processed marker and the database check both missed it) and whose
// process then dies is taken by the reaper for the one that sold: its
// units stay out of the gate. Such a request is a repeat that got past two
// checks and then lost its process within one round trip.

// gate is redis-gate's deductor: every want goes through the gate when the
// deduction starts (admitAll); those let through are deducted as
// lock-fence deducts them; once the last hold was released each
// admission is settled: the units of a want whose order a committed
// transaction created stay sold, the others go back (the first want of an
// order number is the one that created it; a twin of it in the batch gives
// its share back).
type gate struct {
	fenced
	admitted []admission
	none     bool            // the gate turned every want away: no hold
	sold     map[string]bool // order numbers a committed transaction served
}

func startGate(ctx context.Context, s *Service, id int64, _ int, wants []Want) (deductor, []error, error) {
	g := &gate{fenced: fenced{s: s, id: id}, sold: map[string]bool{}}
	if len(wants) == 0 {
		return g, nil, nil
	}
	taken, refused, err := s.admitAll(ctx, id, wants)
	for i, a := range taken {
		if refused[i] == nil && a.gen != "" {
			g.admitted = append(g.admitted, a)
		}
	}
	g.none = !slices.Contains(refused, nil)
	return g, refused, err
}

func (g *gate) next(last *Taken) (claim, bool) {
	if g.none {
		return claim{}, false
	}
	if last != nil {
		for _, no := range last.granted {
			g.sold[no] = true
		}
	}
	return g.fenced.next(last)
}

func (g *gate) deductTx(tx *gorm.DB, h *hold, wants []Want) (Taken, error) {
	t, err := g.fenced.deductTx(tx, h, wants)
	if err != nil {
		return Taken{}, err
	}
	for k, w := range wants {
		if t.Refused[k] == nil {
			t.granted = append(t.granted, w.OrderNo)
		}
	}
	return t, nil
}

// packet is fenced's packet, its wants all granted if it commits.
func (g *gate) packet(h *hold, wants []Want, also string, alsoArgs []any) (*dbx.Packet, Taken, bool) {
	p, t, ok := g.fenced.packet(h, wants, also, alsoArgs)
	for _, w := range wants {
		t.granted = append(t.granted, w.OrderNo)
	}
	return p, t, ok
}

func (g *gate) close(ctx context.Context) {
	served := make([]bool, len(g.admitted))
	for i, a := range g.admitted {
		served[i] = g.sold[a.OrderNo]
		delete(g.sold, a.OrderNo)
	}
	g.s.settleAll(ctx, g.id, g.admitted, served)
	g.admitted = nil
}

func (s *Service) gateKey(id int64) string {
	return s.cfg.KeyPrefix + "gate:{" + strconv.FormatInt(id, 10) + "}"
}

// gateKeys are the gate and its hold keys, in the scripts' KEYS order.
func (s *Service) gateKeys(id int64) []string {
	g := s.gateKey(id)
	return []string{g, g + ":holds", g + ":leases", g + ":ended"}
}

// gateLease is how long admitted units stay held for their request before
// any instance may reap them. A batch takes its wants' units just before
// it waits for the product lock (LockWait), holds it (renewed past LockTTL
// while the batch runs) and settles right after it released the lock,
// so a live holder settles within a few lock waits and TTLs. The default is
// ten times that, and at least a minute: reaping a live holder's units only
// lets the gate admit too many for a moment (the database still refuses
// them, and the holder takes its units back when it settles), while a dead
// holder's units wait the whole lease to come back.
func (s *Service) gateLease() time.Duration {
	if s.cfg.GateLease > 0 {
		return s.cfg.GateLease
	}
	return max(time.Minute, 10*(s.cfg.LockWait+s.cfg.LockTTL))
}

// admission is what the gate took for one want of a deduction; gen "":
// nothing (the product has no gate, or the order exists already).
type admission struct {
	Want
	gen string // the hold's generation
}

// admitAll lets a batch's wants through the gate in one round trip: the
// scripts run in arrival order, as one call per want would. A want that
// pass cannot decide (the gate not seeded yet, the script not loaded in
// Redis, a refusal while leases of dead holders wait to be reaped) is
// asked again alone (admit), which seeds, loads and reaps; a refusal is
// explained by the database (refusal), once per batch when it is sold out.
// It returns what the gate took for each want and each want's refusal; err
// when Redis or the database could not answer (what was taken before it is
// in taken, to settle).
func (s *Service) admitAll(ctx context.Context, productID int64, wants []Want) (taken []admission, refused []error, err error) {
	taken, refused = make([]admission, len(wants)), make([]error, len(wants))
	keys := s.gateKeys(productID)
	gen, lease := rand.Text(), s.gateLease().Milliseconds()
	cmds := make([]*redis.Cmd, len(wants))
	pipe := s.rdb.Pipeline()
	for i, w := range wants {
		cmds[i] = gateTake.EvalSha(ctx, pipe, keys, w.OrderNo, w.Quantity, gen+strconv.Itoa(i), lease)
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	soldOut := false
	for i, w := range wants {
		taken[i].Want = w
		r, err := cmds[i].Slice()
		var rerr redis.Error
		if err != nil && !errors.As(err, &rerr) {
			// Lost on the way: like a failed admit, units it may have
			// taken come back when their lease ends.
			return taken, refused, err
		}
		var code, expired int64
		if err == nil {
			code, _ = r[0].(int64)
			expired, _ = r[2].(int64)
		}
		switch {
		case err == nil && code == 1:
			taken[i].gen, _ = r[1].(string)
			continue
		case err == nil && code == 0 && expired == 0 && soldOut:
			refused[i] = ErrSoldOut
			continue
		case err == nil && code == 0 && expired == 0:
			refused[i], err = s.refusal(ctx, productID, w.Quantity)
		default:
			taken[i], refused[i], err = s.admit(ctx, productID, w)
		}
		if err != nil {
			return taken, refused, err
		}
		soldOut = soldOut || errors.Is(refused[i], ErrSoldOut)
	}
	return taken, refused, nil
}

// admit lets want w for productID through the gate (redis-gate) alone,
// for admitAll. It returns what the gate took
// (settle it once the want's fate is known); or, refused, ErrSoldOut or
// ErrInsufficientStock when the gate is empty and the database agrees,
// ErrBusy when the gate is empty but units are admitted and not committed
// yet; or err, when Redis or the database could not answer.
func (s *Service) admit(ctx context.Context, productID int64, w Want) (a admission, refused, err error) {
	a.Want = w
	keys := s.gateKeys(productID)
	gen := rand.Text()
	reaped := false
	for range admitAttempts {
		r, err := gateTake.Run(ctx, s.rdb, keys, w.OrderNo, w.Quantity, gen, s.gateLease().Milliseconds()).Slice()
		if err != nil {
			return a, nil, err
		}
		switch code, _ := r[0].(int64); code {
		case 1:
			a.gen, _ = r[1].(string)
			return a, nil, nil
		case 0:
			if expired, _ := r[2].(int64); expired > 0 && !reaped {
				// Units of a dead holder may be waiting: bring them back and ask again.
				reaped = true
				if _, err := s.reap(ctx, productID); err != nil {
					return a, nil, err
				}
				continue
			}
			// Refused. Units may still be in flight (admitted, not
			// committed): that is "busy", not "sold out", until the
			// database says so.
			refused, err := s.refusal(ctx, productID, w.Quantity)
			return a, refused, err
		}
		// Not initialised (first use, or Redis lost it): seed from the database.
		if err := s.seedGate(ctx, productID); err != nil {
			return a, nil, err
		}
	}
	return a, nil, errors.New("inventory: gate could not be initialised")
}

// admitAttempts bounds admit's calls of the script: one that finds the
// gate not seeded seeds it, one refused while dead holders' leases wait
// reaps them, and each asks again.
const admitAttempts = 3

// seedGate sets an absent gate to the product's stock. It reads the row and
// sets the gate under the product lock: stock that comes back (a restock, a
// return) is added to the gate under that lock after its commit, and finds
// no gate to add to before the seed, so a return committed between an
// unlocked read and the seed would be missing from the gate for good, its
// buyers told busy.
func (s *Service) seedGate(ctx context.Context, productID int64) error {
	return s.withHold(ctx, productID, oneBucket(0, false), s.cfg.LockWait, func(ctx context.Context, _ *hold) error {
		p, err := s.Get(ctx, productID)
		if err != nil {
			return err
		}
		if s.seeding != nil {
			s.seeding()
		}
		return s.rdb.SetNX(ctx, s.gateKey(productID), p.Stock, 0).Err()
	})
}

// refusal is why a want the gate turned away is refused (err: the
// database could not say). A product found sold out goes into the sold-out
// book here: no batch will see the empty row (the one that took the last
// units wrote without reading it).
func (s *Service) refusal(ctx context.Context, productID, quantity int64) (refused, err error) {
	gen := s.soldOut.generation(productID)
	p, err := s.Get(ctx, productID)
	switch {
	case err != nil:
		return nil, err
	case p.Stock <= 0:
		s.soldOut.learn(productID, gen, p.Version)
		return ErrSoldOut, nil
	case p.Stock < quantity:
		return ErrInsufficientStock, nil
	}
	return ErrBusy, nil
}

// settle ends an admission once its want's fate is known: served (its
// order was committed) keeps the units sold; not served gives them back to
// the gate. An admission that took nothing settles without a call.
func (s *Service) settle(ctx context.Context, productID int64, a admission, served bool) {
	if a.gen == "" {
		return
	}
	ctx = context.WithoutCancel(ctx)
	err := gateSettle.Run(ctx, s.rdb, s.gateKeys(productID), a.OrderNo, a.gen, a.Quantity, boolArg(served), s.gateLease().Milliseconds()).Err()
	if err != nil {
		s.log.Warn("gate hold not settled (it is reaped when its lease ends)", "product_id", productID, "order_no", a.OrderNo, "err", err)
	}
}

// settleAll settles a batch's admissions (served[i]: admitted[i]'s order
// was committed) in one round trip, the scripts in order, as settle one
// by one would; one the pipeline could not run (the script not loaded in
// Redis) is settled alone.
func (s *Service) settleAll(ctx context.Context, productID int64, admitted []admission, served []bool) {
	ctx = context.WithoutCancel(ctx)
	keys, lease := s.gateKeys(productID), s.gateLease().Milliseconds()
	cmds := make([]*redis.Cmd, len(admitted))
	pipe := s.rdb.Pipeline()
	for i, a := range admitted {
		if a.gen != "" {
			cmds[i] = gateSettle.EvalSha(ctx, pipe, keys, a.OrderNo, a.gen, a.Quantity, boolArg(served[i]), lease)
		}
	}
	if pipe.Len() == 0 {
		return
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	for i, c := range cmds {
		if c == nil || c.Err() == nil {
			continue
		}
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			s.settle(ctx, productID, admitted[i], served[i])
			continue
		}
		s.log.Warn("gate hold not settled (it is reaped when its lease ends)", "product_id", productID, "order_no", admitted[i].OrderNo, "err", c.Err())
	}
}

func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gateAdd gives units back to the gate (restock, cancellation), whatever
// strategy this instance uses for the product: the gate may belong to
// another instance (a lab switch is per process), and an absent gate is
// left alone.
func (s *Service) gateAdd(ctx context.Context, id, quantity int64) {
	gateGive.Run(context.WithoutCancel(ctx), s.rdb, []string{s.gateKey(id)}, quantity)
}

// GateLevel reports, for the audit's Redis-vs-database check (R1), the
// gate's counter and the units held for requests whose lease has not
// ended, read at one instant; ok is false when there is no gate for the
// product (a gate exists only while redis-gate deducts the product: a lab
// switch retires it, see UseStrategy). Units in holds whose lease ended are
// in neither: until a reaper brings them back they are lost.
func (s *Service) GateLevel(ctx context.Context, id int64) (units, held int64, ok bool, err error) {
	k := s.gateKeys(id)
	r, err := gateLevelScript.Run(ctx, s.rdb, k[:3]).Int64Slice()
	if err != nil {
		return 0, 0, false, err
	}
	return r[1], r[2], r[0] == 1, nil
}
