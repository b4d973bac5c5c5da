package idem

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrTokenInvalid means a form token was consumed already, expired, never
// issued, or issued to another principal or purpose (409 form_token_invalid).
// The causes are not told apart, so a token cannot be probed.
var ErrTokenInvalid = errors.New("idem: form token invalid")

// maxTokenLen bounds what Consume sends to Redis; issued tokens are 26 chars.
const maxTokenLen = 64

// Tokens issues one-time form tokens: each is bound to a principal and a
// purpose and can be consumed once.
//
// Their known weakness: a token gives no replay. A client that timed out and
// resends its consumed token gets ErrTokenInvalid and must look up what its
// first request did. Idempotency keys (Store) do not have this problem.
type Tokens struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	m      *Metrics
}

// NewTokens returns tokens kept under prefix for ttl; ttl <= 0 means
// 5 minutes (docs/api.md). Tokens always expire.
func NewTokens(rdb redis.UniversalClient, prefix string, ttl time.Duration) *Tokens {
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	return &Tokens{rdb: rdb, prefix: prefix, ttl: ttl}
}

// WithMetrics makes t count consumed and rejected tokens; call it before use.
func (t *Tokens) WithMetrics(m *Metrics) *Tokens {
	t.m = m
	return t
}

// Issue returns a new random token (130 bits) for principal and purpose.
func (t *Tokens) Issue(ctx context.Context, principal, purpose string) (string, time.Time, error) {
	token := rand.Text()
	expires := time.Now().Add(t.ttl)
	ok, err := t.rdb.SetNX(ctx, t.prefix+token, joinParts(principal, purpose), t.ttl).Result()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("idem: issue token: %w", err)
	}
	if !ok { // 2^-130: a bug, not bad luck
		return "", time.Time{}, errors.New("idem: issue token: token collision")
	}
	return token, expires, nil
}

// consumeScript checks the binding and deletes in one step, so of N
// concurrent submissions exactly one wins, and a foreign principal's attempt
// leaves the owner's token alone. It returns the remaining lifetime (ms).
var consumeScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
local ttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
return ttl
`)

// Consumed is a token taken by Consume; Restore gives it back.
type Consumed struct {
	t        *Tokens
	key      string
	binding  string
	deadline time.Time
	restored bool
}

// Consume takes the token if it was issued to principal for purpose and is
// still unused; otherwise ErrTokenInvalid.
func (t *Tokens) Consume(ctx context.Context, principal, purpose, token string) (*Consumed, error) {
	if token == "" || len(token) > maxTokenLen {
		t.m.inc(cTokensRejected)
		return nil, ErrTokenInvalid
	}
	c := &Consumed{t: t, key: t.prefix + token, binding: joinParts(principal, purpose)}
	start := time.Now()
	ms, err := consumeScript.Run(ctx, t.rdb, []string{c.key}, c.binding).Int64()
	if errors.Is(err, redis.Nil) {
		t.m.inc(cTokensRejected)
		return nil, ErrTokenInvalid
	}
	if err != nil {
		return nil, fmt.Errorf("idem: consume token: %w", err)
	}
	t.m.inc(cTokensConsumed)
	c.deadline = start.Add(time.Duration(ms) * time.Millisecond)
	return c, nil
}

// Restore puts the token back for the rest of its lifetime, when the work
// it guarded did not happen (503 busy, 5xx). A token whose lifetime is over
// stays gone. Calling it again does nothing.
func (c *Consumed) Restore(ctx context.Context) error {
	if c.restored {
		return nil
	}
	left := time.Until(c.deadline)
	if left < time.Millisecond {
		c.restored = true
		return nil
	}
	if err := c.t.rdb.SetNX(ctx, c.key, c.binding, left).Err(); err != nil {
		return fmt.Errorf("idem: restore token: %w", err)
	}
	c.restored = true
	return nil
}
