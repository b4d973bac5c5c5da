package inventory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/inventory"
)

// A product created again under its ref (a retry, the demo catalog at every
// start) is found without an insert that fails as a duplicate.
func TestCreateAgainInsertsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(t, inventory.Config{Strategy: inventory.LockFence})
	ctx := context.Background()
	first, created, err := s.Create(ctx, "widget", 100, 5, false, "ref-1", "")
	if err != nil || !created {
		t.Fatalf("first create: created %v, %v", created, err)
	}
	var inserts atomic.Int64
	if err := f.DB.Callback().Create().Before("gorm:create").Register("test:inserts", func(*gorm.DB) { inserts.Add(1) }); err != nil {
		t.Fatal(err)
	}
	again, created, err := s.Create(ctx, "widget", 100, 5, false, "ref-1", "")
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("create again: product %d created %v, %v; want product %d found", again.ID, created, err, first.ID)
	}
	if n := inserts.Load(); n != 0 {
		t.Fatalf("create again tried %d inserts, want none", n)
	}
	// Two at once (two instances starting) still make one product.
	var wg sync.WaitGroup
	ids, made := make([]int64, 2), make([]bool, 2)
	for i := range 2 {
		wg.Go(func() {
			p, created, err := s.Create(ctx, "gadget", 100, 5, false, "ref-2", "")
			if err != nil {
				t.Error(err)
			}
			ids[i], made[i] = p.ID, created
		})
	}
	wg.Wait()
	if ids[0] != ids[1] || made[0] == made[1] {
		t.Fatalf("two creates at once: products %v, created %v; want one product created once", ids, made)
	}
}
