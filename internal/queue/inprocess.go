package queue

import (
	"context"
	"fmt"
	"sync"
)

// InProcess is a LAB shortcut in place of the broker, the shape of the
// best-known seckill tutorials: a Go channel in this process's memory.
// Publish "confirms" as soon as the message is in the channel, so the 202
// comes before anything is durable, and the consumer takes it off the
// channel before the database has it: a process that dies loses every
// message the channel held or its consumers were placing.
type InProcess struct{ ch chan Delivery }

// NewInProcess returns a channel of size messages.
func NewInProcess(size int) *InProcess { return &InProcess{ch: make(chan Delivery, size)} }

// Publish puts the message in the channel, waiting while it is full.
func (p *InProcess) Publish(ctx context.Context, id string, body []byte) error {
	select {
	case p.ch <- Delivery{ID: id, Body: body}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: the in-process channel stayed full: %w", ErrNotConfirmed, ctx.Err())
	}
}

// Consume hands each message to handle, up to workers at once, until ctx
// ends. A message is gone from the channel once taken, whatever handle
// returns: there is nothing to acknowledge and nothing to deliver again.
func (p *InProcess) Consume(ctx context.Context, workers int, handle func(context.Context, Delivery) bool) {
	var running sync.WaitGroup
	defer running.Wait()
	slots := make(chan struct{}, max(workers, 1))
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-p.ch:
			slots <- struct{}{}
			running.Go(func() {
				defer func() { <-slots }()
				handle(ctx, d)
			})
		}
	}
}
