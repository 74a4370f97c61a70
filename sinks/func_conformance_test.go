package sinks_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit/sinktest"
)

// A Go function is a sink (sinks.Func) and passes the sink conformance suite: here a function
// that accepts a batch into memory, as a Go destination would.
func TestFuncConformance(t *testing.T) {
	sinktest.RunSink(t, sinktest.SinkSuite{
		New: func(*testing.T) *sinktest.Destination {
			d := &memoryDestination{}
			return &sinktest.Destination{Sink: sinks.Func(d.deliver), Received: d.rec.Wait, Stall: d.stall}
		},
		Failures: func(*testing.T) []sinktest.Failure {
			return []sinktest.Failure{
				{Name: "typed outcome", Outcome: schemas.Busy, Sink: sinks.Func(func(context.Context, *sinks.Batch) error {
					return &sinks.DeliveryError{Outcome: schemas.Busy, Err: errors.New("queue full, come back later")}
				})},
				{Name: "plain error", Outcome: schemas.GenericError, Sink: sinks.Func(func(context.Context, *sinks.Batch) error {
					return errors.New("database is read-only")
				})},
			}
		},
	})
}

// memoryDestination is a Go function destination: it keeps the events it accepts.
type memoryDestination struct {
	rec  sinktest.Recorder
	mu   sync.Mutex
	held chan struct{}
	once bool
}

func (d *memoryDestination) stall(*testing.T) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = make(chan struct{})
	return d.held
}

func (d *memoryDestination) deliver(ctx context.Context, b *sinks.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	held := d.held
	if held != nil && !d.once {
		d.once = true
		close(held)
	}
	d.mu.Unlock()
	if held != nil {
		<-ctx.Done()
		return ctx.Err()
	}
	out := make([]sinktest.Received, len(b.Events))
	for i, ev := range b.Events {
		out[i] = sinktest.Received{ID: ev.ID}
	}
	d.rec.Add(out...)
	return nil
}
