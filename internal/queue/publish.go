package queue

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Publisher publishes onto the queue with publisher confirms, over one
// connection it opens on first use and opens again after it was lost.
// Publishes of concurrent callers share the channel; each waits for its
// own confirm.
type Publisher struct {
	cfg Config

	mu   sync.Mutex
	conn *amqp.Connection
	ch   *amqp.Channel // in confirm mode; nil: open on next use
}

// NewPublisher returns a publisher; it connects on its first Publish.
func NewPublisher(cfg Config) *Publisher { return &Publisher{cfg: cfg.withDefaults()} }

// Publish sends body under the message id id (persistent) and returns nil
// only once the broker confirmed it. ErrNotConfirmed (wrapped): the broker
// refused it, or ctx ended before its answer came (the message may be in
// the queue); any other error: no broker could be reached.
func (p *Publisher) Publish(ctx context.Context, id string, body []byte) error {
	ch, err := p.channel()
	if err != nil {
		return err
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", p.cfg.Queue, false, false, amqp.Publishing{
		MessageId: id, DeliveryMode: amqp.Persistent, ContentType: "application/json",
		Timestamp: time.Now(), Body: body,
	})
	if err != nil {
		p.drop(ch)
		return fmt.Errorf("%w: %w", ErrNotConfirmed, err)
	}
	ack, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("%w: no confirm in time: %w", ErrNotConfirmed, err)
	case !ack:
		// A channel that had a publish refused may refuse every later
		// one (RabbitMQ 3.10: a quorum queue's leader died while the
		// channel's first publish sought it): the next publish opens a
		// new one.
		p.drop(ch)
		return fmt.Errorf("%w: the broker refused it, or the channel closed before its confirm", ErrNotConfirmed)
	}
	return nil
}

// channel is the open confirm channel, opened now if there is none.
func (p *Publisher) channel() (*amqp.Channel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	p.closeLocked()
	conn, ch, err := dial(p.cfg)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("queue: confirm mode: %w", err)
	}
	p.conn, p.ch = conn, ch
	return ch, nil
}

// drop forgets ch after a failed publish, so the next one opens a new
// connection.
func (p *Publisher) drop(ch *amqp.Channel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == ch {
		p.closeLocked()
	}
}

func (p *Publisher) closeLocked() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}

// Close closes the connection; a later Publish opens a new one.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
}
