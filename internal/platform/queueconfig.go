package platform

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/queue"
)

// validateQueue checks the queued mode's settings, each error naming its
// variable.
func (c Config) validateQueue() []error {
	var errs []error
	bad := func(env, format string, a ...any) {
		errs = append(errs, fmt.Errorf("config: %s: "+format, append([]any{env}, a...)...))
	}
	switch c.SeckillMode {
	case SeckillSync:
		if c.LabQueueShortcut != "" {
			bad("SHOP_LAB_QUEUE_SHORTCUT", "needs SHOP_SECKILL_MODE=%s", SeckillQueue)
		}
		return errs
	case SeckillQueue:
	default:
		bad("SHOP_SECKILL_MODE", "must be %s or %s, got %q", SeckillSync, SeckillQueue, c.SeckillMode)
		return errs
	}
	if c.LabQueueShortcut != "" && !slices.Contains(QueueShortcuts, c.LabQueueShortcut) {
		bad("SHOP_LAB_QUEUE_SHORTCUT", "must be one of %s, got %q", strings.Join(QueueShortcuts, ", "), c.LabQueueShortcut)
	}
	if c.LabQueueShortcut != "in-process" {
		if err := queue.ValidateURL(c.AMQPURL); err != nil {
			bad("SHOP_AMQP_URL", "SHOP_SECKILL_MODE=queue needs a RabbitMQ URL (amqp://guest:guest@127.0.0.1:5672/): %v", err)
		}
	}
	if strings.TrimSpace(c.QueueName) == "" {
		bad("SHOP_QUEUE_NAME", "must not be empty")
	}
	if c.QueueConfirmTimeout <= 0 {
		bad("SHOP_QUEUE_CONFIRM_TIMEOUT", "must be positive, got %s", c.QueueConfirmTimeout)
	}
	if c.QueueLease < time.Minute {
		bad("SHOP_QUEUE_LEASE", "must be at least 1m (it must outlive the queue's lag), got %s", c.QueueLease)
	}
	return errs
}
