package queue

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestValidateURL(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", true},
		{"amqps://u:p@broker.example:5671/vhost", true},
		{"amqp://127.0.0.1:5672, amqp://127.0.0.1:5673", true},
		{"", false},
		{"http://127.0.0.1:5672", false},
		{"amqp://", false},
		{"amqp://127.0.0.1:5672,redis://x:1", false},
	} {
		if err := ValidateURL(tt.url); (err == nil) != tt.ok {
			t.Errorf("ValidateURL(%q) = %v, want ok %v", tt.url, err, tt.ok)
		}
	}
}

// The in-process channel "confirms" at once and hands each message to one
// handler; a full channel is ErrNotConfirmed when the caller's context ends.
func TestInProcess(t *testing.T) {
	p := NewInProcess(1)
	ctx := context.Background()
	if err := p.Publish(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	full, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := p.Publish(full, "b", []byte("2")); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("publish into a full channel: %v, want ErrNotConfirmed", err)
	}
	got := make(chan Delivery, 1)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Consume(cctx, 2, func(_ context.Context, d Delivery) bool { got <- d; return true })
	}()
	if d := <-got; d.ID != "a" || string(d.Body) != "1" {
		t.Fatalf("delivered %+v", d)
	}
	stop()
	<-done
}

// A URL list whose first node does not answer connects to the next: the
// broker on 127.0.0.1:5672 (the machine's own).
func TestDialSkipsDeadNode(t *testing.T) {
	cfg := Config{URL: "amqp://guest:guest@127.0.0.1:1/, amqp://guest:guest@127.0.0.1:5672/", Queue: "queue-test-dial"}.withDefaults()
	conn, ch, err := dial(cfg)
	if err != nil {
		t.Fatalf("dial with a live second node: %v (is RabbitMQ up on 127.0.0.1:5672?)", err)
	}
	defer conn.Close()
	if _, err := ch.QueueDelete(cfg.Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
}
