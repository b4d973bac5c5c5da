package queue

import (
	"context"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Delivery is one message handed to a handler.
type Delivery struct {
	ID   string // the publisher's message id
	Body []byte
	// Redelivered: the broker delivered it before and it was not
	// acknowledged (a consumer died or lost its link, or asked again).
	Redelivered bool
}

// retryPause is how long a message its handler could not finish waits
// before it goes back to the queue: a quorum queue hands a returned
// message out again at once, and its handler failed on a dependency that
// needs a moment.
const retryPause = time.Second

// Consume delivers the queue's messages to handle, each on its own
// goroutine (so up to Config.Prefetch are handled at once), until ctx ends.
// A message whose handler returns true is acknowledged then (it leaves the
// queue); false gives it back to the queue after retryPause, to be
// delivered again.
// A lost connection is opened again (every dialBackoff); the deliveries it
// held and had not acknowledged go back to the queue, and their handlers'
// Ack then fails. It returns when ctx ended and every handler returned.
func Consume(ctx context.Context, cfg Config, handle func(context.Context, Delivery) bool) {
	cfg = cfg.withDefaults()
	var handlers sync.WaitGroup
	defer handlers.Wait()
	for ctx.Err() == nil {
		conn, ch, err := dial(cfg)
		if err == nil {
			err = ch.Qos(cfg.Prefetch, 0, false)
		}
		var msgs <-chan amqp.Delivery
		if err == nil {
			msgs, err = ch.ConsumeWithContext(ctx, cfg.Queue, "", cfg.AutoAck, false, false, false, nil)
		}
		if err != nil {
			cfg.Log.Warn("queue consumer: broker not reachable; trying again", "queue", cfg.Queue, "err", err)
			if conn != nil {
				_ = conn.Close()
			}
			sleep(ctx, dialBackoff)
			continue
		}
		cfg.Log.Info("queue consumer: consuming", "queue", cfg.Queue, "prefetch", cfg.Prefetch, "auto_ack", cfg.AutoAck)
		for m := range msgs {
			handlers.Go(func() {
				settle(ctx, cfg, m, handle(ctx, Delivery{ID: m.MessageId, Body: m.Body, Redelivered: m.Redelivered}))
			})
		}
		if ctx.Err() != nil {
			// Shutting down: the broker stopped delivering; the handlers
			// still running acknowledge on this channel before it closes,
			// so a restart does not deliver their messages again.
			handlers.Wait()
		}
		_ = conn.Close()
		if ctx.Err() == nil {
			cfg.Log.Warn("queue consumer: connection lost; its unacknowledged messages go back to the queue", "queue", cfg.Queue)
			sleep(ctx, dialBackoff)
		}
	}
}

// dialBackoff is the pause between connection attempts of a consumer.
const dialBackoff = 500 * time.Millisecond

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// settle acknowledges m (done) or gives it back to the queue. A failure
// means the channel is gone: the broker gives m back on its own.
func settle(ctx context.Context, cfg Config, m amqp.Delivery, done bool) {
	if cfg.AutoAck {
		return
	}
	var err error
	if done {
		err = m.Ack(false)
	} else {
		sleep(ctx, retryPause)
		err = m.Nack(false, true)
	}
	if err != nil {
		cfg.Log.Debug("queue consumer: acknowledgement not sent (the channel is gone; the broker delivers the message again)", "message_id", m.MessageId, "err", err)
	}
}
