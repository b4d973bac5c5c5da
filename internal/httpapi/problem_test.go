package httpapi

import (
	"errors"
	"fmt"
	"testing"
)

// redisReply is a Redis error reply, as go-redis returns one.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// A Redis Cluster failing over answers CLUSTERDOWN/TRYAGAIN, a replica being
// promoted READONLY or LOADING: all are 503 unavailable, never 500.
func TestTransientRedisRepliesAreUnavailable(t *testing.T) {
	for _, reply := range []string{"CLUSTERDOWN The cluster is down", "TRYAGAIN Multiple keys request during rehashing of slot",
		"LOADING Redis is loading the dataset in memory", "MASTERDOWN Link with MASTER is down", "READONLY You can't write against a read only replica."} {
		p := problemFor(fmt.Errorf("idem: claim: %w", redisReply(reply)))
		if p.Code != "unavailable" || p.Status != 503 {
			t.Errorf("%q: %s %d, want unavailable 503", reply, p.Code, p.Status)
		}
	}
	if p := problemFor(fmt.Errorf("x: %w", redisReply("ERR wrong number of arguments"))); p.Code != "internal" {
		t.Errorf("a Redis programming error: %s, want internal", p.Code)
	}
	if p := problemFor(errors.New("boom")); p.Code != "internal" {
		t.Errorf("boom: %s", p.Code)
	}
}
