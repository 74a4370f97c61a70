package broker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/egridio/egrid/sinks/broker"
)

// fakeConn is a publisher and subscriber that records its Close.
type fakeConn struct{ closed chan struct{} }

func newFakeConn() *fakeConn { return &fakeConn{closed: make(chan struct{})} }

func (*fakeConn) Publish(string, ...*message.Message) error { return nil }
func (*fakeConn) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return make(chan *message.Message), nil
}
func (c *fakeConn) Close() error { close(c.closed); return nil }

// gatedDial is an open function whose dials each wait for release, and counts them.
type gatedDial struct {
	dials   atomic.Int32
	entered chan struct{} // receives as each dial starts
	release chan struct{}
	conn    *fakeConn // what a dial returns; nil: it fails
}

var errDialFailed = errors.New("dial tcp 127.0.0.1:5672: i/o timeout")

func newGatedDial(conn *fakeConn) *gatedDial {
	return &gatedDial{entered: make(chan struct{}, 16), release: make(chan struct{}), conn: conn}
}

func (g *gatedDial) open() (*fakeConn, error) {
	g.dials.Add(1)
	g.entered <- struct{}{}
	<-g.release
	if g.conn == nil {
		return nil, errDialFailed
	}
	return g.conn, nil
}

// Callers that arrive while the broker is being dialled wait for that one dial and share its
// outcome: a failed dial fails them all at once, and the next caller dials again. The lazy
// publisher and subscriber held their lock while dialling (up to 5 s for a silent server):
// every delivery to that broker queued behind it, and after a failed dial each waiter in turn
// dialled again, one after the other.
func TestBrokerDialIsSharedByItsWaiters(t *testing.T) {
	const callers = 5
	for _, tc := range lazyCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newGatedDial(nil)
				use, _ := tc.make(g.open)
				results := make(chan error, callers)
				for range callers {
					go func() { results <- use(context.Background()) }()
				}
				synctest.Wait() // every caller waits: one in the dial, the others for it
				if n := g.dials.Load(); n != 1 {
					t.Fatalf("%d callers made %d dials, want 1 shared", callers, n)
				}
				close(g.release)
				for range callers {
					err := <-results
					if !errors.Is(err, errDialFailed) || !strings.Contains(err.Error(), "connecting to RabbitMQ") {
						t.Errorf("caller got %v, want the shared dial's failure", err)
					}
				}
				if n := g.dials.Load(); n != 1 {
					t.Fatalf("after the dial failed %d dials were made, want 1", n)
				}
				// A caller arriving after the failure dials again.
				if err := use(context.Background()); !errors.Is(err, errDialFailed) {
					t.Fatalf("caller after the failure got %v, want its own dial's failure", err)
				}
				if n := g.dials.Load(); n != 2 {
					t.Fatalf("%d dials in all, want 2: a caller after a failed dial dials again", n)
				}
			})
		})
	}
}

// Close returns while a dial is in flight, and releases every caller waiting for it, the one
// whose use started the dial too; the dial, when it ends, closes the connection it made. Close
// waited for the dial (up to 5 s for a silent server), and so did egrid's shutdown; then the
// caller that started the dial still waited for it after Close.
func TestBrokerCloseDoesNotWaitForADial(t *testing.T) {
	for _, tc := range lazyCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				conn := newFakeConn()
				g := newGatedDial(conn)
				use, closer := tc.make(g.open)
				dialler := make(chan error, 1)
				go func() { dialler <- use(context.Background()) }()
				<-g.entered
				waiter := make(chan error, 1)
				go func() { waiter <- use(context.Background()) }()
				synctest.Wait() // both wait for the dial
				if err := closer.Close(); err != nil {
					t.Fatalf("Close = %v", err)
				}
				synctest.Wait() // the dial is still held
				for who, ch := range map[string]chan error{"the caller that started the dial": dialler, "a caller waiting for it": waiter} {
					select {
					case err := <-ch:
						if err == nil || !strings.Contains(err.Error(), "closed") {
							t.Errorf("%s got %v at Close, want the brokers closed", who, err)
						}
					default:
						t.Errorf("%s still waits for the dial after Close", who)
					}
				}
				if err := use(context.Background()); err == nil || !strings.Contains(err.Error(), "closed") {
					t.Errorf("caller after Close got %v, want the brokers closed", err)
				}
				close(g.release)
				<-conn.closed // the connection dialled after Close is closed
				if n := g.dials.Load(); n != 1 {
					t.Errorf("%d dials, want 1", n)
				}
			})
		})
	}
}

// A caller stops waiting for a dial when its context ends, the one whose use started the dial
// too (a delivery's publish whose attempt ended); the dial goes on in the background and its
// connection serves the next caller. The caller that started a dial waited for it to the end.
func TestBrokerDialIsAbandonedAtTheCallersContext(t *testing.T) {
	for _, tc := range lazyCases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				conn := newFakeConn()
				g := newGatedDial(conn)
				use, closer := tc.make(g.open)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				start := time.Now()
				if err := use(ctx); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connecting to RabbitMQ") {
					t.Fatalf("caller whose context ended during its dial got %v, want its deadline while connecting", err)
				}
				if d := time.Since(start); d != time.Second {
					t.Fatalf("the caller returned after %s, want its 1s deadline", d)
				}
				close(g.release)
				synctest.Wait() // the dial ends in the background
				if err := use(context.Background()); err != nil {
					t.Fatalf("the next caller got %v, want the connection the abandoned dial made", err)
				}
				if n := g.dials.Load(); n != 1 {
					t.Errorf("%d dials, want 1", n)
				}
				_ = closer.Close()
				<-conn.closed
			})
		})
	}
}

// lazyCases are the lazy publisher and subscriber, each with a use that dials when needed.
var lazyCases = []struct {
	name string
	make func(open func() (*fakeConn, error)) (use func(context.Context) error, c interface{ Close() error })
}{
	{name: "publisher", make: func(open func() (*fakeConn, error)) (func(context.Context) error, interface{ Close() error }) {
		p := broker.NewLazyPublisher(broker.RabbitMQ, func() (message.Publisher, error) {
			c, err := open()
			if err != nil {
				return nil, err
			}
			return c, nil
		})
		return func(ctx context.Context) error {
			m := message.NewMessage("1", nil)
			m.SetContext(ctx)
			return p.Publish("orders", m)
		}, p
	}},
	{name: "subscriber", make: func(open func() (*fakeConn, error)) (func(context.Context) error, interface{ Close() error }) {
		s := broker.NewLazySubscriber(broker.RabbitMQ, func() (message.Subscriber, error) {
			c, err := open()
			if err != nil {
				return nil, err
			}
			return c, nil
		})
		return func(ctx context.Context) error { _, err := s.Subscribe(ctx, "orders"); return err }, s
	}},
}
