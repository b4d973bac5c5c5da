package inventory

import (
	"cmp"
	"context"

	"gorm.io/gorm"
)

// Strategy names, the lab's comparison axis (README says what each
// demonstrates). Only LockFence is safe on its own; the others exist so the
// harness can show what goes wrong. Lock, LockConditional and LockFence
// add one piece at a time: a lock around a read-modify-write, the
// conditional decrement instead, then the fence on it.
const (
	Naive           = "naive"
	Lock            = "lock"
	LockConditional = "lock-conditional"
	LockFence       = "lock-fence"
	Conditional     = "conditional"
	RedisGate       = "redis-gate"
)

// Strategies lists every strategy, the valid values of --stock-strategy.
var Strategies = []string{Naive, Lock, LockConditional, LockFence, Conditional, RedisGate}

// A deductor is one strategy's way through a Deduction: the holds it
// needs, one after another; what it does under each before the caller's
// transaction and inside it; and what each committed transaction tells it.
// One file per implementation: fenced.go (lock-fence), gate.go (redis-gate),
// walk.go (a product held in stock buckets), lab.go (the unsafe ones).
type deductor interface {
	// next is the claim of the hold the next transaction runs under, given
	// what the last committed one took (nil: none yet); ok is false when
	// the deduction is over.
	next(last *Taken) (c claim, ok bool)
	// prepare runs under h before the caller opens its transaction.
	prepare(ctx context.Context, h *hold) error
	// deductTx takes stock for wants, in arrival order, inside tx.
	deductTx(tx *gorm.DB, h *hold, wants []Want) (Taken, error)
	// close runs once the last hold was released.
	close(ctx context.Context)
}

// strategy is a strategy name resolved: whether it deducts under the
// product lock (which lets the wants of one product share a hold), whether
// it keeps a gate in Redis, whether a hold of it may be kept, and how a Deduction of it starts, for a product
// held in k buckets (wants go through the gate there; refused holds each
// want's refusal, or nil).
type strategy struct {
	name  string
	locks bool
	gated bool
	keeps bool // a batch leader may keep its hold for the next batch (keep.go)
	start func(ctx context.Context, s *Service, id int64, k int, wants []Want) (how deductor, refused []error, err error)
}

// strategies are the named strategies; a product held in stock buckets is
// deducted by walking them (resolve).
var strategies = map[string]strategy{
	LockFence:       {name: LockFence, locks: true, keeps: true, start: startFenced},
	RedisGate:       {name: RedisGate, locks: true, gated: true, keeps: true, start: startGate},
	LockConditional: {name: LockConditional, locks: true, start: startLockConditional},
	Lock:            {name: Lock, locks: true, start: startLocked},
	Naive:           {name: Naive, start: startNaive},
	Conditional:     {name: Conditional, start: startConditional},
}

// resolve is the one place a strategy name becomes its implementation: a
// product held in k > 1 stock buckets is walked, by lock-fence, whatever a
// lab switch says (only lock-fence walks buckets).
func resolve(name string, k int) strategy {
	if k > 1 {
		return strategy{name: LockFence, locks: true, start: startWalk}
	}
	if st, ok := strategies[name]; ok {
		return st
	}
	return strategies[LockFence]
}

// Strategy is the deduction strategy in use.
func (s *Service) Strategy() string { return s.cfg.Strategy }

// UseStrategy makes this instance deduct productID's stock by the named
// strategy instead of the configured one ("" restores the default). It is a
// LAB switch for the operator's side-by-side race: the same load against the
// safe strategy and an unsafe one at once, each on its own product. A switch
// into or out of a gated strategy retires the product's gate counter:
// deductions by another strategy do not keep it in step, so it is seeded
// afresh from the database when the gate is next needed. The counter is
// deleted after the switch, outside labMu (a Redis call must not stall
// StrategyOf): a gate seeded in between is only seeded again, the gate only
// saves work. A product held in buckets is always walked by lock-fence
// (resolve).
func (s *Service) UseStrategy(productID int64, name string) {
	if s.switchStrategy(productID, name) {
		if err := s.rdb.Del(context.Background(), s.gateKey(productID)).Err(); err != nil {
			s.log.Warn("LAB: gate counter not retired on a strategy switch", "product_id", productID, "err", err)
		}
	}
}

// switchStrategy records productID's strategy and reports whether the
// switch went into or out of a gated strategy.
func (s *Service) switchStrategy(productID int64, name string) (retireGate bool) {
	s.labMu.Lock()
	defer s.labMu.Unlock()
	if s.labStrategy == nil {
		s.labStrategy = map[int64]string{}
	}
	old, ok := s.labStrategy[productID]
	if !ok {
		old = s.cfg.Strategy
	}
	if name == "" {
		delete(s.labStrategy, productID)
	} else {
		s.labStrategy[productID] = name
	}
	return resolve(cmp.Or(name, s.cfg.Strategy), 1).gated != resolve(old, 1).gated
}

// StrategyOf is the name of the strategy that deducts productID's stock
// here (a product held in buckets: see resolve).
func (s *Service) StrategyOf(productID int64) string {
	s.labMu.RLock()
	defer s.labMu.RUnlock()
	if name, ok := s.labStrategy[productID]; ok {
		return name
	}
	return s.cfg.Strategy
}

// anyGated reports whether any product may be deducted through a gate
// here, or admitted through one (the queued seckill mode).
func (s *Service) anyGated() bool {
	if resolve(s.cfg.Strategy, 1).gated || s.cfg.Queued {
		return true
	}
	s.labMu.RLock()
	defer s.labMu.RUnlock()
	for _, name := range s.labStrategy {
		if resolve(name, 1).gated {
			return true
		}
	}
	return false
}
