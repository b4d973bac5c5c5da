package lockx_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/lockx"
)

// The usual shape: wait a bounded time, renew while working, stop working the
// moment the lock is lost, and let the store check the fence.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := lockx.New(rdb, lockx.Options{Prefix: "example:lock:"})
	defer locks.Close()

	ctx := context.Background()
	l, err := locks.Acquire(ctx, "product:7", lockx.AcquireOptions{TTL: 5 * time.Second, Wait: 2 * time.Second, Watchdog: true})
	if errors.Is(err, lockx.ErrNotObtained) {
		fmt.Println("busy, try later")
		return
	}
	if err != nil {
		log.Fatal(err) // Redis unreachable: not the same as busy
	}
	defer l.Release(context.WithoutCancel(ctx))

	work := l.Context() // cancelled if the lock is lost
	// UPDATE stock SET qty = qty - 1, fence = ?, fence_holder = ?
	// WHERE id = 7 AND (fence < ? OR (fence = ? AND fence_holder = ?))
	// with l.Fence(): its Number and Holder (see Fence)
	_ = work
	fmt.Println("fenced write with", l.Fence().Number > 0)
	// Output: fenced write with true
}

// Re-entry: code running under the Lock's context can take the same key again.
func ExampleWithLock() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := lockx.New(rdb, lockx.Options{Prefix: "example:lock:"})
	defer locks.Close()

	outer, err := locks.Acquire(context.Background(), "order:42", lockx.AcquireOptions{TTL: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	inner, err := locks.Acquire(outer.Context(), "order:42", lockx.AcquireOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(inner.Depth(), inner.Fence().Number == outer.Fence().Number)
	_ = inner.Release(context.Background())
	_ = outer.Release(context.Background())
	// Output: 2 true
}
