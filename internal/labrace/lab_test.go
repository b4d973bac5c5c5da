package labrace

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/loadgen"
)

// stock is an in-memory Stock: products and the per-product strategies.
type stock struct {
	mu       sync.Mutex
	products map[int64]inventory.Product
	uses     map[int64]string
}

func newStock() *stock {
	return &stock{products: map[int64]inventory.Product{}, uses: map[int64]string{}}
}

func (s *stock) Get(_ context.Context, id int64) (inventory.Product, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.products[id]
	if !ok {
		return p, inventory.ErrNotFound
	}
	return p, nil
}

func (s *stock) CreateLab(_ context.Context, name string, price, units int64, _ string) (inventory.Product, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := inventory.Product{ID: int64(len(s.products) + 1), Name: name, PriceCents: price, Stock: units}
	s.products[p.ID] = p
	return p, nil
}

func (s *stock) Strategy() string { return inventory.LockFence }

func (s *stock) UseStrategy(id int64, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uses[id] = name
}

func (s *stock) sell(id, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.products[id]
	p.Stock -= n
	s.products[id] = p
}

// A two-sided race runs each side's buyers on its own product, switched to
// its strategy while it runs (and back after), refuses a second race while
// it runs, samples the racer's counters, and ends audited.
func TestTwoSidedRace(t *testing.T) {
	t.Parallel()
	st := newStock()
	release := make(chan struct{})
	racer := func(ctx context.Context, s Spec, t *Tally) error {
		<-release
		// Every buyer answered: half got an order, the rest sold out.
		st.sell(s.ProductID, int64(s.Buyers/2))
		t.Update(loadgen.Stats{Done: s.Buyers, Elapsed: time.Millisecond,
			Answers: loadgen.Answers{Created: s.Buyers / 2, SoldOut: s.Buyers - s.Buyers/2}})
		return nil
	}
	var audited sync.Map
	l := New(Config{Stock: st, Racer: racer, SelfURL: func() string { return "http://127.0.0.1:1" },
		Audit: func(_ context.Context, o audit.Options) (audit.Report, error) {
			audited.Store(o.ProductID, true)
			return audit.Report{OK: true}, nil
		}})

	units, conc := int64(10), 4
	v, err := l.Start(context.Background(), l.cfg.Log, Request{Stock: &units, Buyers: 20, Concurrency: &conc,
		Strategies: []string{inventory.LockFence, inventory.Naive}})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Sides) != 2 || v.Done || v.Concurrency != 4 || v.Phase != "login" {
		t.Fatalf("first view: %+v", v)
	}
	naive := v.Sides[1].ProductID
	st.mu.Lock()
	got := st.uses[naive]
	st.mu.Unlock()
	if got != inventory.Naive {
		t.Fatalf("the naive side's product runs %q, want naive", got)
	}
	var busy *BusyError
	if _, err := l.Start(context.Background(), l.cfg.Log, Request{Stock: &units, Buyers: 1}); !errors.As(err, &busy) || busy.Running != v.RaceID {
		t.Fatalf("second race while one runs: %v, want BusyError naming %s", err, v.RaceID)
	}
	if l.Info().RunningRace == nil {
		t.Fatal("Info does not name the running race")
	}
	close(release)

	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok := l.Get(v.RaceID)
		if !ok {
			t.Fatal("the race is gone")
		}
		if got.Done {
			for _, s := range got.Sides {
				if s.Created != 10 || s.SoldOut != 10 || s.Stock != 0 || s.Phase != "done" || s.Audit == nil {
					t.Fatalf("side at the end: %+v", s)
				}
				if _, ok := audited.Load(s.ProductID); !ok {
					t.Fatalf("product %d was not audited", s.ProductID)
				}
			}
			if got.Error != nil {
				t.Fatalf("race error: %s", *got.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("race not done in 10s: %+v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st.mu.Lock()
	back := st.uses[naive]
	st.mu.Unlock()
	if back != "" {
		t.Fatalf("the naive side's product still runs %q after the race", back)
	}
	if l.Info().RunningRace != nil {
		t.Fatal("Info still names a running race")
	}
	if _, ok := l.Get("nope"); ok {
		t.Fatal("Get found a race that never ran")
	}
}

// Without its own address the lab cannot send its buyers anywhere.
func TestNoSelfURL(t *testing.T) {
	t.Parallel()
	units := int64(1)
	l := New(Config{Stock: newStock()})
	_, err := l.Start(context.Background(), l.cfg.Log, Request{Stock: &units, Buyers: 1})
	if !errors.Is(err, ErrNoSelfURL) {
		t.Fatalf("Start without SelfURL: %v, want ErrNoSelfURL", err)
	}
}
