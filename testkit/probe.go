package testkit

import (
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/asynkron/protoactor-go/actor"
)

// Probe is an actor that records every message it receives, for single-actor tests: spawn the
// actor under test with the probe's PID as its collaborator, then [Expect] what arrives.
type Probe struct {
	pid  *actor.PID
	mu   sync.Mutex
	msgs []any
}

// PID is the probe's address.
func (p *Probe) PID() *actor.PID { return p.pid }

// System returns the harness's own actor system for single-actor tests (created on first use).
func (h *Harness) System() *actor.ActorSystem {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.system == nil {
		h.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(slog.DiscardHandler)
		}))
	}
	return h.system
}

// Probe spawns a probe on [Harness.System].
func (h *Harness) Probe() *Probe {
	p := &Probe{}
	p.pid = h.System().Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
			return
		}
		p.mu.Lock()
		p.msgs = append(p.msgs, c.Message())
		p.mu.Unlock()
	}))
	return p
}

// Spawn spawns props on [Harness.System].
func (h *Harness) Spawn(props *actor.Props) *actor.PID { return h.System().Root.Spawn(props) }

// Expect settles and returns the oldest message the probe has not handed out yet, failing the
// test if there is none or it is not a T.
func Expect[T any](t testing.TB, p *Probe) T {
	t.Helper()
	synctest.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	var zero T
	if len(p.msgs) == 0 {
		t.Fatalf("probe: no message, want %T", zero)
		return zero
	}
	m := p.msgs[0]
	p.msgs = p.msgs[1:]
	v, ok := m.(T)
	if !ok {
		t.Fatalf("probe: got %T, want %T", m, zero)
	}
	return v
}

// ExpectNoMsg settles and fails the test if the probe holds a message.
func (p *Probe) ExpectNoMsg(t testing.TB) {
	t.Helper()
	synctest.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.msgs) != 0 {
		t.Fatalf("probe: got %T, want no message", p.msgs[0])
	}
}
