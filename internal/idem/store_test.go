package idem

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func newTestStore(t *testing.T, o StoreOptions) *Store {
	t.Helper()
	rdb, prefix := testRedis(t)
	o.Prefix = prefix
	return NewStore(rdb, o)
}

func TestStoreClaimCompleteReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := NewMetrics("t")
	s := newTestStore(t, StoreOptions{Metrics: m})
	scope := Scope("u1", "POST", "/orders", "k1")

	c, rec, err := s.Claim(ctx, scope, "fp1")
	if err != nil || c == nil || rec != nil {
		t.Fatalf("first Claim = %v, %v, %v; want a claim", c, rec, err)
	}
	if _, _, err := s.Claim(ctx, scope, "fp1"); !errors.Is(err, ErrInUse) {
		t.Fatalf("same request in flight: err = %v, want ErrInUse", err)
	}
	if _, _, err := s.Claim(ctx, scope, "fp2"); !errors.Is(err, ErrFingerprintMismatch) {
		t.Fatalf("other request in flight: err = %v, want ErrFingerprintMismatch", err)
	}
	want := Record{Status: 201, Header: map[string]string{"Content-Type": "application/json", "Location": "/o/1"}, Body: []byte("{\"a\":\"\x00\xff\"}")}
	if err := c.Complete(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatalf("Release after Complete: %v, want no-op", err)
	}
	c2, rec, err := s.Claim(ctx, scope, "fp1")
	if err != nil || c2 != nil || rec == nil {
		t.Fatalf("retry Claim = %v, %v, %v; want a record", c2, rec, err)
	}
	if rec.Status != want.Status || string(rec.Body) != string(want.Body) || len(rec.Header) != 2 ||
		rec.Header["Location"] != "/o/1" || rec.Header["Content-Type"] != "application/json" || rec.Fingerprint != "fp1" {
		t.Fatalf("replayed %+v, want %+v", rec, want)
	}
	if _, _, err := s.Claim(ctx, scope, "fp2"); !errors.Is(err, ErrFingerprintMismatch) {
		t.Fatalf("other request after completion: err = %v, want ErrFingerprintMismatch", err)
	}
	for c, want := range map[counter]uint64{cClaims: 1, cInUse: 1, cMismatches: 2, cStored: 1, cReplays: 1, cLost: 0} {
		if got := m.value(c); got != want {
			t.Errorf("%s = %d, want %d", counterInfo[c].name, got, want)
		}
	}
}

func TestStoreRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{})
	scope := Scope("u1", "POST", "/orders", "k1")
	c, _, err := s.Claim(ctx, scope, "fp1")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Released: even a different request may now use the key.
	if c, _, err := s.Claim(ctx, scope, "fp2"); err != nil || c == nil {
		t.Fatalf("Claim after Release = %v, %v; want a claim", c, err)
	}
}

// A crashed holder never completes: its lease expires and the next request
// runs. The late holder can then neither store over nor free the new claim.
func TestStoreLeaseExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := NewMetrics("")
	s := newTestStore(t, StoreOptions{Lease: 150 * time.Millisecond, Metrics: m})
	scope := Scope("u1", "POST", "/orders", "k1")
	old, _, err := s.Claim(ctx, scope, "fp1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Claim(ctx, scope, "fp1"); !errors.Is(err, ErrInUse) {
		t.Fatalf("within the lease: err = %v, want ErrInUse", err)
	}
	time.Sleep(300 * time.Millisecond)
	cur, _, err := s.Claim(ctx, scope, "fp1")
	if err != nil || cur == nil {
		t.Fatalf("after the lease: %v, %v; want a claim", cur, err)
	}
	if err := old.Complete(ctx, Record{Status: 201, Body: []byte("old")}); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("late Complete: err = %v, want ErrClaimLost", err)
	}
	if _, _, err := s.Claim(ctx, scope, "fp1"); !errors.Is(err, ErrInUse) {
		t.Fatalf("late Complete must not touch the new claim: err = %v", err)
	}
	if err := cur.Complete(ctx, Record{Status: 201, Body: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	if _, rec, _ := s.Claim(ctx, scope, "fp1"); rec == nil || string(rec.Body) != "new" {
		t.Fatalf("replay = %+v, want the new holder's record", rec)
	}
	if got := m.value(cLost); got != 1 {
		t.Errorf("claims lost = %d, want 1", got)
	}
}

func TestStoreLateReleaseKeepsNewClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{Lease: 100 * time.Millisecond})
	scope := Scope("u1", "POST", "/orders", "k1")
	old, _, err := s.Claim(ctx, scope, "fp1")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	if _, _, err := s.Claim(ctx, scope, "fp1"); err != nil {
		t.Fatal(err)
	}
	if err := old.Release(ctx); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("late Release: err = %v, want ErrClaimLost", err)
	}
	if _, _, err := s.Claim(ctx, scope, "fp1"); !errors.Is(err, ErrInUse) {
		t.Fatalf("late Release freed the new claim: err = %v", err)
	}
}

func TestStoreRetentionExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{Retention: 200 * time.Millisecond})
	scope := Scope("u1", "POST", "/orders", "k1")
	c, _, err := s.Claim(ctx, scope, "fp1")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, Record{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if _, rec, _ := s.Claim(ctx, scope, "fp1"); rec == nil {
		t.Fatal("no replay within retention")
	}
	time.Sleep(400 * time.Millisecond)
	if c, rec, err := s.Claim(ctx, scope, "fp2"); err != nil || c == nil || rec != nil {
		t.Fatalf("after retention: %v, %v, %v; want a fresh claim", c, rec, err)
	}
}

// The library side of "a lost Redis record cannot make a second order":
// when the lease (or the record) is gone and the same request runs twice,
// both runs derive the same order number, so a unique index (here a map
// standing in for it) admits one insert.
func TestExpiredClaimIsSafeWithUniqueOrderNo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{Lease: 100 * time.Millisecond})
	var (
		mu     sync.Mutex
		unique = map[string]int{} // order_no -> run that inserted it
	)
	insert := func(run int, orderNo string) (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if first, dup := unique[orderNo]; dup {
			return first, false
		}
		unique[orderNo] = run
		return run, true
	}
	scope := Scope("42", "POST", "/api/v1/orders", "key-1")
	slow, _, err := s.Claim(ctx, scope, "fp")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // the first run stalls past its lease
	retry, _, err := s.Claim(ctx, scope, "fp")
	if err != nil || retry == nil {
		t.Fatalf("retry after lease: %v, %v", retry, err)
	}
	if _, ok := insert(2, Ref("R", "42", "key-1")); !ok {
		t.Fatal("retry's insert refused")
	}
	if err := retry.Complete(ctx, Record{Status: 201}); err != nil {
		t.Fatal(err)
	}
	// The stalled first run wakes up and tries its insert: refused.
	if first, ok := insert(1, Ref("R", "42", "key-1")); ok || first != 2 {
		t.Fatalf("stalled run inserted a second order (ok=%v, first=%d)", ok, first)
	}
	if err := slow.Release(ctx); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("stalled Release: %v, want ErrClaimLost", err)
	}
	if len(unique) != 1 {
		t.Fatalf("%d orders, want 1", len(unique))
	}
}

// failKeep makes a client's next store of a record fail at once, the way a
// write refused in a failover does, without sending it.
type failKeep struct{ armed atomic.Bool }

func (h *failKeep) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failKeep) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 1 && args[1] == completeScript.Hash() && h.armed.CompareAndSwap(true, false) {
			err := errors.New("READONLY You can't write against a read only replica")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failKeep) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A record Redis refused to keep frees its key: the retry runs work again
// at once (the caller's own check answers it) instead of meeting ErrInUse
// until the lease ends.
func TestDoFreesTheKeyWhenTheKeepFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	hook := &failKeep{}
	rdb.AddHook(hook)
	s := NewStore(rdb, StoreOptions{Prefix: prefix, Lease: time.Hour})
	scope := Scope("u1", "POST", "/orders", "k1")
	hook.armed.Store(true)
	done, err := s.Do(ctx, scope, "fp1", func(context.Context) Record { return Record{Status: 201, Body: []byte("first")} })
	if err != nil || done.Unsaved == nil || done.Replayed {
		t.Fatalf("first Do: %+v, %v; want an answer marked unsaved", done, err)
	}
	runs := 0
	done, err = s.Do(ctx, scope, "fp1", func(context.Context) Record { runs++; return Record{Status: 201, Body: []byte("again")} })
	if err != nil || runs != 1 || done.Unsaved != nil {
		t.Fatalf("retry: %+v, %v, work ran %d times; want it run once and kept", done, err, runs)
	}
}

// TestDoKeepsTheKeyOfAnOutcomeInDoubt: a record InDoubt is neither kept nor
// freed: a retry meets ErrInUse (it must not run while the first may still
// land), and once the caller releases the held claim it runs afresh.
func TestDoKeepsTheKeyOfAnOutcomeInDoubt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t, StoreOptions{})
	scope := Scope("u1", "POST", "/orders", "k-doubt")
	done, err := s.Do(ctx, scope, "fp", func(context.Context) Record {
		return Record{Status: 503, InDoubt: true}
	})
	if err != nil || done.Held == nil || done.Replayed || done.Unsaved != nil {
		t.Fatalf("Do in doubt = %+v, %v; want the claim held", done, err)
	}
	if _, _, err := s.Claim(ctx, scope, "fp"); !errors.Is(err, ErrInUse) {
		t.Fatalf("retry while in doubt: %v, want ErrInUse", err)
	}
	if err := done.Held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if c, rec, err := s.Claim(ctx, scope, "fp"); err != nil || c == nil || rec != nil {
		t.Fatalf("retry once released = %v, %v, %v; want a claim", c, rec, err)
	}
}
