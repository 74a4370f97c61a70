package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// errBrokersClosed is the cause of a publish or subscribe after [Brokers.Close].
var errBrokersClosed = errors.New("the broker connections are closed")

// lazy holds the connection of one broker kind in one direction (a publisher or a
// subscriber), opened on first use and opened again when it says it is gone (see healthy).
//
// Opening dials the broker, which may take up to dialTimeout, so it happens without the lock,
// in a goroutine of its own: one dial is in flight at a time, started by the caller that found
// no connection, and that caller and every caller arriving while it runs wait for it and share
// its outcome, the connection or the error; a caller arriving after a failed dial starts a new
// one. No caller, and not close, waits on the lock for a dial: close returns at once and
// releases every caller waiting for the dial (the one that started it too) with
// errBrokersClosed, a caller whose context ends stops waiting, and a dial that ends after close
// closes what it opened.
type lazy[T interface{ Close() error }] struct {
	kind    Kind
	open    func() (T, error)
	closing chan struct{} // closed by close

	mu     sync.Mutex
	cur    T
	has    bool
	dial   *dial[T] // the dial in flight, or nil
	closed bool
	old    sync.WaitGroup // closing of replaced connections
}

// dial is one dial in flight; done closes when v and err are set.
type dial[T any] struct {
	done chan struct{}
	v    T
	err  error
}

func newLazy[T interface{ Close() error }](k Kind, open func() (T, error)) lazy[T] {
	return lazy[T]{kind: k, open: open, closing: make(chan struct{})}
}

// healthy reports whether a publisher or subscriber can still be used. Those that reconnect
// in the background report false while disconnected, so the next use dials at once instead
// of waiting for their back-off.
func healthy(p any) bool {
	if h, ok := p.(interface{ connected() bool }); ok {
		return h.connected()
	}
	return true
}

// get returns the connection, dialling it (or waiting for the dial in flight) when there is
// none or it is gone. It returns when the dial ends, when the lazy closes or when ctx ends,
// whichever comes first: the caller that started the dial waits for it no longer than the
// others, and a dial nobody waits for any more goes on in the background (bounded by
// dialTimeout), its connection kept for the next caller, or closed when the lazy closed
// meanwhile.
func (l *lazy[T]) get(ctx context.Context) (T, error) {
	var zero T
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return zero, errBrokersClosed
	}
	if l.has && healthy(l.cur) {
		v := l.cur
		l.mu.Unlock()
		return v, nil
	}
	if l.has {
		old := l.cur
		l.cur, l.has = zero, false
		l.old.Add(1)
		go func() { defer l.old.Done(); _ = old.Close() }() // it may wait for its uses in flight
	}
	d := l.dial
	if d == nil {
		d = &dial[T]{done: make(chan struct{})}
		l.dial = d
		go l.run(d)
	}
	l.mu.Unlock()
	select {
	case <-d.done:
		return d.v, d.err
	case <-l.closing:
		return zero, errBrokersClosed
	case <-ctx.Done():
		return zero, fmt.Errorf("connecting to %s: %w", l.kind, context.Cause(ctx))
	}
}

// run makes dial d, keeps its connection unless the lazy closed meanwhile (then it closes
// it), and hands its outcome to whoever still waits for it.
func (l *lazy[T]) run(d *dial[T]) {
	v, err := l.open()
	l.mu.Lock()
	l.dial = nil
	closed := l.closed
	if err == nil && !closed {
		l.cur, l.has = v, true
	}
	l.mu.Unlock()
	switch {
	case err != nil:
		d.err = fmt.Errorf("connecting to %s: %w", l.kind, err)
	case closed:
		_ = v.Close()
		d.err = errBrokersClosed
	default:
		d.v = v
	}
	close(d.done)
}

// close closes the connection, then calls also (when not nil), and refuses further use. It
// does not wait for a dial in flight, which closes its connection when it ends. It waits for
// replaced connections to close. It is idempotent: only the first call closes.
func (l *lazy[T]) close(also func() error) error {
	var zero T
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.closing)
	v, has := l.cur, l.has
	l.cur, l.has = zero, false
	l.mu.Unlock()
	var errs []error
	if has {
		errs = append(errs, v.Close())
	}
	if also != nil {
		errs = append(errs, also())
	}
	l.old.Wait()
	return errors.Join(errs...)
}

// lazyPublisher is the publisher of one broker kind, dialled on first use (see lazy).
type lazyPublisher struct {
	lazy[message.Publisher]
	closer func() error // closes what the lazy publisher shares (GoChannel)
	// perSink: each [Sink] publishes on a connection of its own (see ownPublisher).
	perSink bool
	owned   map[*lazyPublisher]struct{} // guarded by lazy.mu
}

// ownPublisher returns, for a [Sink] to publish with, a publisher of the same broker with a
// connection of its own (dialled on first use, again after it is lost), and the function that
// releases it: it closes that connection in the background, which [Brokers.Close] waits for. It
// returns nil when the publisher shares its connection between sinks, or is closed.
//
// RabbitMQ's publisher is so: amqp091 cannot give up on a channel whose broker does not answer
// without closing the whole connection, so a call that hangs is ended by cutting the connection
// (see answeredOrCut), at its timeout or when its sink closes. On a shared connection that cut
// ended the publishes of every other sink; on a sink's own it ends only that sink's.
//
// NATS's publisher is so too: nats.go writes a message under its connection's lock, so a write
// stuck on a server that stopped reading is ended by closing the connection (see
// natsDialer.cutStuckWrite), which on a shared connection failed every other sink's publish in
// flight, and held them behind it until then.
func (l *lazyPublisher) ownPublisher() (message.Publisher, func()) {
	if !l.perSink {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil
	}
	o := newLazyPublisher(l.kind, l.open)
	if l.owned == nil {
		l.owned = make(map[*lazyPublisher]struct{})
	}
	l.owned[o] = struct{}{}
	release := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.owned[o]; !ok || l.closed {
			return // closed with l
		}
		delete(l.owned, o)
		l.old.Add(1)
		go func() { defer l.old.Done(); _ = o.Close() }()
	}
	return o, release
}

func newLazyPublisher(k Kind, open func() (message.Publisher, error)) *lazyPublisher {
	return &lazyPublisher{lazy: newLazy(k, open)}
}

// Publish implements [message.Publisher]. While the broker is being dialled it waits for the
// dial until the first message's context ends (a [Sink] sets its attempt's) or the publisher
// closes.
func (l *lazyPublisher) Publish(topic string, msgs ...*message.Message) error {
	ctx := context.Background()
	if len(msgs) > 0 {
		ctx = msgs[0].Context() // a sink's attempt: it stops waiting for a dial when it ends
	}
	p, err := l.get(ctx)
	if err != nil {
		return err
	}
	return p.Publish(topic, msgs...)
}

// Close implements [message.Publisher], and closes the connections of the sinks' own
// publishers still open. It is idempotent, and returns without waiting for a dial in flight.
func (l *lazyPublisher) Close() error {
	return l.close(func() error {
		l.mu.Lock()
		owned := l.owned
		l.owned = nil
		l.mu.Unlock()
		var errs []error
		for o := range owned {
			errs = append(errs, o.Close())
		}
		if l.closer != nil {
			errs = append(errs, l.closer())
		}
		return errors.Join(errs...)
	})
}

// lazySubscriber is the subscriber of one broker kind, dialled on first Subscribe (see lazy).
// watermill subscribers reconnect by themselves once connected; egrid's own (NATS, RabbitMQ)
// report when their connection is gone, and the next Subscribe dials again.
type lazySubscriber struct {
	lazy[message.Subscriber]
}

func newLazySubscriber(k Kind, open func() (message.Subscriber, error)) *lazySubscriber {
	return &lazySubscriber{lazy: newLazy(k, open)}
}

// Subscribe implements [message.Subscriber]. While the broker is being dialled it waits for
// the dial until ctx ends or the subscriber closes.
func (l *lazySubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.Subscribe(ctx, topic)
}

// Close implements [message.Subscriber]. It is idempotent, and returns without waiting for a
// dial in flight.
func (l *lazySubscriber) Close() error { return l.close(nil) }
