package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ConsumeNaive is the seed article's validateToken: GET, compare, then DEL
// in a second command. It is BROKEN: concurrent submissions can all read the
// token before any of them deletes it, so several pass (TestConsumeNaiveRace
// shows it). It lives in a test file so that nothing but that test can call it.
func (t *Tokens) ConsumeNaive(ctx context.Context, principal, purpose, token string) error {
	key := t.prefix + token
	v, err := t.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) || (err == nil && v != joinParts(principal, purpose)) {
		return ErrTokenInvalid
	}
	if err != nil {
		return fmt.Errorf("idem: consume token: %w", err)
	}
	if err := t.rdb.Del(ctx, key).Err(); err != nil {
		return fmt.Errorf("idem: consume token: %w", err)
	}
	return nil
}
