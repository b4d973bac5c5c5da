// Package queue carries messages through a durable RabbitMQ quorum queue at
// least once: a publish is done only when the broker confirmed it (publisher
// confirms: the queue's quorum has it on disk), and a delivery leaves the
// queue only when its handler acknowledges it (manual ack), so a consumer
// that dies before acknowledging has its messages delivered again, to
// another consumer or to itself once back. At least once means a message
// may arrive twice: the handler must be idempotent. The package knows
// nothing of shops.
package queue

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Config says where the queue is and how it is used.
type Config struct {
	// URL is the broker, amqp://user:pass@host:port/vhost; several URLs
	// separated by commas are tried in turn (the nodes of a cluster).
	URL string
	// Queue is the quorum queue's name (declared, durable, on first use).
	Queue string
	// Prefetch caps a consumer's unacknowledged deliveries (0: 256).
	Prefetch int
	// DialTimeout bounds a connection attempt (0: 2s).
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat: a link silent for two of them is
	// taken for dead (0: 2s).
	Heartbeat time.Duration
	// AutoAck is a LAB switch: the broker forgets a message as soon as it
	// is delivered, so a consumer that dies holding it loses it.
	AutoAck bool
	Log     *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Prefetch <= 0 {
		c.Prefetch = 256
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 2 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// ErrNotConfirmed is a publish the broker did not confirm: it refused the
// message (a negative acknowledgement), or no answer came in time (the link
// or the queue's quorum was lost). The message may still be in the queue:
// nothing is promised either way.
var ErrNotConfirmed = errors.New("queue: publish not confirmed by the broker")

// ValidateURL checks a Config.URL without dialing, for the shop's
// configuration check.
func ValidateURL(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return errors.New("empty")
	}
	for _, u := range urls(raw) {
		p, err := url.Parse(u)
		if err != nil {
			return err
		}
		if p.Scheme != "amqp" && p.Scheme != "amqps" {
			return fmt.Errorf("%q is not an amqp:// or amqps:// URL", u)
		}
		if p.Host == "" {
			return fmt.Errorf("%q names no host", u)
		}
	}
	return nil
}

func urls(raw string) []string {
	var out []string
	for _, u := range strings.Split(raw, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// dial opens a connection to the first node that answers, and declares the
// quorum queue on it.
func dial(cfg Config) (*amqp.Connection, *amqp.Channel, error) {
	var errs []error
	for _, u := range urls(cfg.URL) {
		conn, err := amqp.DialConfig(u, amqp.Config{Heartbeat: cfg.Heartbeat, Dial: amqp.DefaultDial(cfg.DialTimeout), Properties: amqp.Table{"connection_name": "shop"}})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ch, err := conn.Channel()
		if err == nil {
			err = declare(ch, cfg.Queue)
		}
		if err != nil {
			_ = conn.Close()
			errs = append(errs, err)
			continue
		}
		return conn, ch, nil
	}
	return nil, nil, fmt.Errorf("queue: no broker answered: %w", errors.Join(errs...))
}

// declare makes the queue durable and replicated: a quorum queue keeps a
// message on a majority of its nodes before the publish is confirmed.
func declare(ch *amqp.Channel, name string) error {
	_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	return err
}
