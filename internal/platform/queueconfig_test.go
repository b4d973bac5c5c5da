package platform

import (
	"io"
	"strings"
	"testing"
)

// The queued mode's settings are checked at start, each error naming its
// variable; a valid queued configuration loads.
func TestLoadConfigQueueMode(t *testing.T) {
	t.Parallel()
	queued := map[string]string{"SHOP_SECKILL_MODE": "queue", "SHOP_AMQP_URL": "amqp://guest:guest@127.0.0.1:5672/"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for qk, qv := range queued {
			if _, ok := m[qk]; !ok {
				m[qk] = qv
			}
		}
		return m
	}
	tests := []struct {
		name, env string
		vars      map[string]string
	}{
		{"unknown mode", "SHOP_SECKILL_MODE", map[string]string{"SHOP_SECKILL_MODE": "kafka"}},
		{"queue without a broker", "SHOP_AMQP_URL", map[string]string{"SHOP_SECKILL_MODE": "queue"}},
		{"not an amqp URL", "SHOP_AMQP_URL", with("SHOP_AMQP_URL", "http://127.0.0.1:5672")},
		{"a bad node in the list", "SHOP_AMQP_URL", with("SHOP_AMQP_URL", "amqp://127.0.0.1:5672,amqp://")},
		{"lease shorter than a minute", "SHOP_QUEUE_LEASE", with("SHOP_QUEUE_LEASE", "10s")},
		{"no confirm wait", "SHOP_QUEUE_CONFIRM_TIMEOUT", with("SHOP_QUEUE_CONFIRM_TIMEOUT", "0s")},
		{"prefetch 0", "SHOP_QUEUE_PREFETCH", with("SHOP_QUEUE_PREFETCH", "0")},
		{"unknown shortcut", "SHOP_LAB_QUEUE_SHORTCUT", with("SHOP_LAB_QUEUE_SHORTCUT", "fire-and-forget")},
		{"shortcut in the sync mode", "SHOP_LAB_QUEUE_SHORTCUT", map[string]string{"SHOP_LAB_QUEUE_SHORTCUT": "auto-ack"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := LoadConfig("shop", nil, env(tt.vars), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.env) {
				t.Fatalf("%v: err = %v, want one naming %s", tt.vars, err, tt.env)
			}
		})
	}
	c, _, err := LoadConfig("shop", nil, env(queued), io.Discard)
	if err != nil || c.SeckillMode != SeckillQueue || !c.QueueConsume || c.QueueName == "" {
		t.Fatalf("valid queued configuration: %+v, %v", c, err)
	}
	if c, _, err := LoadConfig("shop", nil, env(map[string]string{"SHOP_SECKILL_MODE": "queue", "SHOP_LAB_QUEUE_SHORTCUT": "in-process"}), io.Discard); err != nil || len(c.Lab()) == 0 {
		t.Fatalf("the in-process shortcut needs no broker and is a lab switch: %v, lab %v", err, c.Lab())
	}
}
