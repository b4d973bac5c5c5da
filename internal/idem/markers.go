package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Markers remember that a business key (user+product, say) was processed
// and what came of it (an order number). They are a fast filter in front
// of the database, no more: a marker can be missing (not yet written, expired, Redis lost), so
// the database unique constraint on the result stays the final guarantee.
type Markers struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// NewMarkers returns markers kept under prefix for ttl (0: no expiry).
func NewMarkers(rdb redis.UniversalClient, prefix string, ttl time.Duration) *Markers {
	return &Markers{rdb: rdb, prefix: prefix, ttl: ttl}
}

// Get returns the value marked for key, if any.
func (m *Markers) Get(ctx context.Context, key string) (string, bool, error) {
	return MarkerRead{m.rdb.Get(ctx, m.prefix+key)}.Result()
}

// A MarkerRead is Get built and not sent, for a caller that sends Cmd in a
// round trip it makes anyway (package ride), then reads Result.
type MarkerRead struct{ cmd *redis.StringCmd }

// Prepare builds the read of key's marker without sending it.
func (m *Markers) Prepare(ctx context.Context, key string) MarkerRead {
	return MarkerRead{redis.NewStringCmd(ctx, "get", m.prefix+key)}
}

// Cmd is the command to send.
func (r MarkerRead) Cmd() redis.Cmder { return r.cmd }

// Result is Get's answer, once Cmd's reply is in.
func (r MarkerRead) Result() (string, bool, error) {
	v, err := r.cmd.Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("idem: get marker: %w", err)
	}
	return v, true, nil
}

// Mark records that key was processed with value; call it after the
// database commit, never before.
func (m *Markers) Mark(ctx context.Context, key, value string) error {
	if err := m.rdb.Set(ctx, m.prefix+key, value, m.ttl).Err(); err != nil {
		return fmt.Errorf("idem: mark: %w", err)
	}
	return nil
}

// MarkAll records several processed keys (key -> value) in one round trip.
func (m *Markers) MarkAll(ctx context.Context, marks map[string]string) error {
	if len(marks) == 0 {
		return nil
	}
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, v := range marks {
			p.Set(ctx, m.prefix+k, v, m.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("idem: mark: %w", err)
	}
	return nil
}
