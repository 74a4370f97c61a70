package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/internal/natstest"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/router/store/storetest"
	"github.com/egridio/egrid/schemas"
)

// The tests run against an in-process nats-server (the version in go.mod) with JetStream on
// files in a temporary directory, started once for the package: it is deterministic, needs
// nothing installed, and never skips. The machine's shared server on 127.0.0.1:4222 is left
// alone (its version and leftover state are not this test's to choose). Every store gets a
// unique prefix, and its streams and buckets are deleted when the test ends.
var serverURL string

func TestMain(m *testing.M) { natstest.Main(m, "egrid-jetstream-store-", &serverURL) }

var prefixes atomic.Int64

// newPrefix returns a prefix no other test uses and deletes what was made under it when t
// ends.
func newPrefix(t testing.TB) string {
	t.Helper()
	p := fmt.Sprintf("T%d", prefixes.Add(1))
	t.Cleanup(func() { deleteAll(t, p) })
	return p
}

func connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(serverURL)
	if err != nil {
		t.Fatalf("connecting to %s: %v", serverURL, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func deleteAll(t testing.TB, prefix string) {
	nc, err := nats.Connect(serverURL)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer nc.Close()
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var del []string
	for n := range names.Name() {
		if strings.HasPrefix(n, prefix+"_") || strings.HasPrefix(n, "KV_"+prefix+"_") {
			del = append(del, n)
		}
	}
	for _, n := range del {
		if err := js.DeleteStream(ctx, n); err != nil {
			t.Errorf("cleanup: deleting stream %s: %v", n, err)
		}
	}
}

func open(t testing.TB, nc *nats.Conn, prefix string) *jetstream.Store {
	t.Helper()
	s, err := jetstream.Open(t.Context(), nc, jetstream.Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	nc := connect(t)
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, nc, newPrefix(t)) })
}

// A new Store on the same prefix sees everything the closed one wrote (the dir of the reopen
// suite names the prefix).
func TestReopen(t *testing.T) {
	nc := connect(t)
	var mu sync.Mutex
	byDir := map[string]string{}
	storetest.RunReopen(t, func(t *testing.T, dir string) store.Store {
		mu.Lock()
		p, ok := byDir[dir]
		if !ok {
			p = newPrefix(t)
			byDir[dir] = p
		}
		mu.Unlock()
		return open(t, nc, p)
	})
}

// Dial opens its own connection and closes it with the store.
func TestDial(t *testing.T) {
	p := newPrefix(t)
	s, err := jetstream.Dial(t.Context(), serverURL, jetstream.Options{Prefix: p})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if err := s.PutTopic(t.Context(), "t", nil); err != nil {
		t.Fatalf("PutTopic: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := jetstream.Dial(t.Context(), "nats://127.0.0.1:1", jetstream.Options{Prefix: p}); err == nil {
		t.Error("Dial to a port nobody listens on returned no error")
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opts jetstream.Options
		want string // part of the error, "" for none
	}{
		{name: "zero value", opts: jetstream.Options{}},
		{name: "production", opts: jetstream.Options{Prefix: "egrid-prod_1", Replicas: 3}},
		{name: "dot in prefix", opts: jetstream.Options{Prefix: "a.b"}, want: `prefix "a.b"`},
		{name: "too many replicas", opts: jetstream.Options{Replicas: 7}, want: "replicas 7"},
		{name: "negative timeout", opts: jetstream.Options{Timeout: -time.Second}, want: "timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// Names with characters streams, subjects and keys do not allow are stored and listed back.
func TestNamesAreEscaped(t *testing.T) {
	ctx := t.Context()
	s := open(t, connect(t), newPrefix(t))
	defer s.Close()
	names := []string{"Orders.EU", "a b*>", "x_1", "ünï/cødé"}
	for _, n := range names {
		if err := s.PutTopic(ctx, n, []byte(n)); err != nil {
			t.Fatalf("PutTopic(%q): %v", n, err)
		}
		if err := s.PutSubscription(ctx, n, n+"~sub", nil); err != nil {
			t.Fatalf("PutSubscription(%q): %v", n, err)
		}
		if _, err := s.Append(ctx, n, time.Unix(1, 0), []*schemas.Event{{ID: n}}); err != nil {
			t.Fatalf("Append(%q): %v", n, err)
		}
	}
	defs, err := s.Topics(ctx)
	if err != nil {
		t.Fatalf("Topics: %v", err)
	}
	if len(defs) != len(names) {
		t.Fatalf("Topics = %v, want %d topics", defs, len(names))
	}
	for _, d := range defs {
		if string(d.Spec) != d.Name {
			t.Errorf("topic %q has spec %q", d.Name, d.Spec)
		}
		subs, err := s.Subscriptions(ctx, d.Name)
		if err != nil || len(subs) != 1 || subs[0].Name != d.Name+"~sub" {
			t.Errorf("Subscriptions(%q) = %v, %v; want one named %q", d.Name, subs, err, d.Name+"~sub")
		}
		got, err := s.Read(ctx, d.Name, 1, 10)
		if err != nil || len(got) != 1 || got[0].Event.ID != d.Name {
			t.Errorf("Read(%q) = %v, %v; want the one event", d.Name, got, err)
		}
	}
	// A topic named like another's escaped form is another topic.
	if _, err := s.LastSeq(ctx, "Orders_2EEU"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LastSeq of an escaped name = %v, want ErrNotFound", err)
	}
}

// Two stores on the same prefix: the one whose view of a subscription is stale gets
// ErrFenced from UpdateSubscription and changes nothing; after loading again it may write.
func TestUpdateSubscriptionFenced(t *testing.T) {
	ctx := t.Context()
	nc, p := connect(t), newPrefix(t)
	a, b := open(t, nc, p), open(t, nc, p)
	defer a.Close()
	defer b.Close()
	if err := a.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.PutSubscription(ctx, "t", "sub", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 1}); err != nil {
		t.Fatalf("first owner's update: %v", err)
	}
	// b takes the subscription over: it loads, then writes.
	if _, err := b.LoadSubscription(ctx, "t", "sub"); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 5}); err != nil {
		t.Fatalf("new owner's update: %v", err)
	}
	err := a.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 9, Probation: []byte("stale")})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale owner's update = %v, want ErrFenced", err)
	}
	st, err := b.LoadSubscription(ctx, "t", "sub")
	if err != nil {
		t.Fatal(err)
	}
	if st.Cursor != 5 || st.Probation != nil {
		t.Errorf("state after a fenced update = cursor %d, probation %q; want 5 and none", st.Cursor, st.Probation)
	}
	// A definition change is not fenced by a stale view: it reads the record again and
	// carries the owner's state, not the one a last read.
	if _, err := a.LoadSubscription(ctx, "t", "sub"); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 6}); err != nil {
		t.Fatal(err)
	}
	if err := a.PutSubscription(ctx, "t", "sub", []byte("v2")); err != nil {
		t.Errorf("PutSubscription on a stale view = %v, want it written", err)
	}
	if st, err := b.LoadSubscription(ctx, "t", "sub"); err != nil || st.Cursor != 6 {
		t.Errorf("state after a definition change = cursor %d, %v; want the owner's 6", st.Cursor, err)
	}
	if err := a.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 7}); err != nil {
		t.Errorf("update after loading again: %v", err)
	}
}

// Three stores (three cluster nodes) changing one subscription's definition: a node whose
// view of the record is stale because the others updated or deleted it since still writes its
// definition — on the state stored (the owner's cursor and epoch, not the ones it last saw),
// or as a new subscription when it was deleted — instead of failing with ErrFenced and losing
// the change.
func TestPutSubscriptionOnAStaleViewIsWritten(t *testing.T) {
	ctx := t.Context()
	nc, p := connect(t), newPrefix(t)
	a, b, c := open(t, nc, p), open(t, nc, p), open(t, nc, p)
	defer a.Close()
	defer b.Close()
	defer c.Close()
	if err := a.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	defs := func(t *testing.T) string {
		t.Helper()
		ds, err := b.Subscriptions(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		var out string
		for _, d := range ds {
			out += d.Name + "=" + string(d.Spec) + ";"
		}
		return out
	}

	// Updated on the other nodes since: PUT on a, on c, on b, on a.
	t.Run("updated", func(t *testing.T) { putOnAStaleView(t, a, b, c, defs) })
	// Deleted on another node since: created on a, deleted on c, PUT on a.
	t.Run("deleted", func(t *testing.T) { putAfterADelete(t, a, c, defs) })
}

func putOnAStaleView(t *testing.T, a, b, c *jetstream.Store, defs func(*testing.T) string) {
	ctx := t.Context()
	if err := a.PutSubscription(ctx, "t", "upd", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	st, err := c.LoadSubscription(ctx, "t", "upd")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PutSubscription(ctx, "t", "upd", []byte("c1")); err != nil {
		t.Fatal(err)
	}
	if err := b.PutSubscription(ctx, "t", "upd", []byte("b1")); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateSubscription(ctx, "t", "upd", store.Update{Epoch: st.Epoch, Cursor: 4, Probation: []byte("owner's")}); err != nil {
		t.Fatal(err)
	}
	if err := a.PutSubscription(ctx, "t", "upd", []byte("a2")); err != nil {
		t.Fatalf("PutSubscription after the others' writes = %v, want it written", err)
	}
	if got := defs(t); got != "upd=a2;" {
		t.Errorf("definitions = %q, want upd=a2;", got)
	}
	got, err := c.LoadSubscription(ctx, "t", "upd")
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != st.Epoch || got.Cursor != 4 || string(got.Probation) != "owner's" {
		t.Errorf("state after the definition change = epoch %d, cursor %d, probation %q; want the stored %d, 4, owner's",
			got.Epoch, got.Cursor, got.Probation, st.Epoch)
	}
	// The owner's view is stale now: its state write stays fenced.
	if err := b.UpdateSubscription(ctx, "t", "upd", store.Update{Epoch: st.Epoch, Cursor: 5}); !errors.Is(err, store.ErrFenced) {
		t.Errorf("owner's update after another node's definition change = %v, want ErrFenced", err)
	}
}

func putAfterADelete(t *testing.T, a, c *jetstream.Store, defs func(*testing.T) string) {
	ctx := t.Context()
	if err := a.PutSubscription(ctx, "t", "del", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	old, err := a.LoadSubscription(ctx, "t", "del")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSubscription(ctx, "t", "del"); err != nil {
		t.Fatal(err)
	}
	if err := a.PutSubscription(ctx, "t", "del", []byte("a2")); err != nil {
		t.Fatalf("PutSubscription after another node's delete = %v, want it created", err)
	}
	if got := defs(t); !strings.Contains(got, "del=a2;") {
		t.Errorf("definitions = %q, want del=a2", got)
	}
	if got, err := c.LoadSubscription(ctx, "t", "del"); err != nil || got.Epoch == old.Epoch {
		t.Errorf("subscription created again = epoch %d, %v; want a new epoch (not %d)", got.Epoch, err, old.Epoch)
	}
}

// Two stores (two cluster nodes) appending to one topic: the one that did not see the other's
// events finds its pipeline refused whole, reads the journal's end again and appends after
// them — no interleaving, no gap, nothing twice.
func TestAppendAfterAnotherWriter(t *testing.T) {
	ctx := t.Context()
	nc, p := connect(t), newPrefix(t)
	a, b := open(t, nc, p), open(t, nc, p)
	defer a.Close()
	defer b.Close()
	if err := a.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	evs := func(ids ...string) []*schemas.Event {
		var out []*schemas.Event
		for _, id := range ids {
			out = append(out, &schemas.Event{ID: id})
		}
		return out
	}
	if last, err := a.Append(ctx, "t", time.Unix(1, 0), evs("a1", "a2")); err != nil || last != 2 {
		t.Fatalf("a's Append = %d, %v; want 2", last, err)
	}
	if last, err := b.Append(ctx, "t", time.Unix(1, 0), evs("b1")); err != nil || last != 3 {
		t.Fatalf("b's Append = %d, %v; want 3", last, err)
	}
	if last, err := a.Append(ctx, "t", time.Unix(1, 0), evs("a3", "a4")); err != nil || last != 5 {
		t.Fatalf("a's Append after b's = %d, %v; want 5", last, err)
	}
	if last, err := a.Append(ctx, "t", time.Unix(1, 0), evs("a5")); err != nil || last != 6 {
		t.Errorf("a's next Append = %d, %v; want 6", last, err)
	}
	got, err := b.Read(ctx, "t", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, fmt.Sprint(e.Seq, ":", e.Event.ID))
	}
	if want := "1:a1 2:a2 3:b1 4:a3 5:a4 6:a5"; strings.Join(ids, " ") != want {
		t.Errorf("journal = %s, want %s", strings.Join(ids, " "), want)
	}
}

// When NATS is gone, calls fail at once with ErrNotConnected (the router answers a failed
// publish 503) instead of hanging.
func TestOutageFails(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		MaxPayload: jetstream.MinMaxPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("in-process server not ready within 10s")
	}
	defer srv.Shutdown()
	disconnected := make(chan struct{})
	nc, err := nats.Connect(srv.ClientURL(), nats.DisconnectErrHandler(func(*nats.Conn, error) { close(disconnected) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := jetstream.Open(t.Context(), nc, jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "t", time.Unix(1, 0), []*schemas.Event{{ID: "1"}}); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	select {
	case <-disconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not notice the server going within 10s")
	}
	if _, err := s.Append(ctx, "t", time.Unix(1, 0), []*schemas.Event{{ID: "2"}}); !errors.Is(err, jetstream.ErrNotConnected) {
		t.Errorf("Append during an outage = %v, want ErrNotConnected", err)
	}
	if err := s.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 1}); !errors.Is(err, jetstream.ErrNotConnected) {
		t.Errorf("UpdateSubscription during an outage = %v, want ErrNotConnected", err)
	}
	if _, err := s.Topics(ctx); !errors.Is(err, jetstream.ErrNotConnected) {
		t.Errorf("Topics during an outage = %v, want ErrNotConnected", err)
	}
}

// While the connection to NATS is down the store's health is Failed, with a reason saying
// what is refused and what to do, since when; once the client has reconnected it is Healthy
// again. It was Healthy throughout: GET /admin/health answered 200 "healthy" and the console
// showed "Store: healthy" while every publish got 503.
func TestHealthReportsALostConnection(t *testing.T) {
	opts := &natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		MaxPayload: jetstream.MinMaxPayload,
	}
	start := func() *natsserver.Server {
		t.Helper()
		srv, err := natsserver.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("in-process server not ready within 10s")
		}
		return srv
	}
	srv := start()
	opts.Port = srv.Addr().(*net.TCPAddr).Port // the same port again
	defer func() { srv.Shutdown() }()
	disconnected, reconnected := make(chan struct{}, 1), make(chan struct{}, 1)
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := jetstream.Open(t.Context(), nc, jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if h := s.Health(); h.State != store.Healthy || h.Reason != "" {
		t.Fatalf("Health while connected = %+v, want Healthy", h)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	select {
	case <-disconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not notice the server going within 10s")
	}
	h := s.Health()
	if h.State != store.Failed || h.Since.IsZero() {
		t.Errorf("Health while NATS is down = %+v, want Failed with the time it was found", h)
	}
	for _, want := range []string{"not connected to NATS", "refused", "reconnects by itself"} {
		if !strings.Contains(h.Reason, want) {
			t.Errorf("Health reason while NATS is down = %q, want it to say %q", h.Reason, want)
		}
	}
	if again := s.Health(); !again.Since.Equal(h.Since) {
		t.Errorf("Since moved from %v to %v while the connection stayed down", h.Since, again.Since)
	}

	srv = start()
	select {
	case <-reconnected:
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not reconnect within 30s")
	}
	if h := s.Health(); h.State != store.Healthy || h.Reason != "" {
		t.Errorf("Health once reconnected = %+v, want Healthy", h)
	}
}

// Health's Since is the start of the outage going on. It was set by the first refused call or
// Health call of an outage and cleared only by a Health call made while connected, so after an
// outage that ended with nobody asking Health, the next outage was reported down since the
// first one.
func TestHealthSinceIsTheCurrentOutage(t *testing.T) {
	opts := &natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		MaxPayload: jetstream.MinMaxPayload,
	}
	start := func() *natsserver.Server {
		t.Helper()
		srv, err := natsserver.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("in-process server not ready within 10s")
		}
		return srv
	}
	srv := start()
	opts.Port = srv.Addr().(*net.TCPAddr).Port // the same port again
	defer func() { srv.Shutdown() }()
	disconnected, reconnected := make(chan struct{}, 4), make(chan struct{}, 4)
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := jetstream.Open(t.Context(), nc, jetstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("the client did not %s within 30s", what)
		}
	}

	// Outage 1, found by a refused call and by Health; nobody asks Health once reconnected.
	srv.Shutdown()
	srv.WaitForShutdown()
	wait(disconnected, "notice the server going")
	if _, err := s.Topics(t.Context()); !errors.Is(err, jetstream.ErrNotConnected) {
		t.Fatalf("Topics while NATS is down: %v, want ErrNotConnected", err)
	}
	first := s.Health()
	if first.State != store.Failed {
		t.Fatalf("Health in the first outage = %+v, want Failed", first)
	}
	srv = start()
	wait(reconnected, "reconnect")
	between := time.Now()

	// Outage 2.
	srv.Shutdown()
	srv.WaitForShutdown()
	wait(disconnected, "notice the server going again")
	h := s.Health()
	if h.State != store.Failed || h.Since.Before(between) {
		t.Errorf("Health in the second outage = %v since %v; want Failed since after the reconnect at %v (the first outage was found at %v)", h.State, h.Since, between, first.Since)
	}
	if again := s.Health(); !again.Since.Equal(h.Since) {
		t.Errorf("Since moved from %v to %v while the connection stayed down", h.Since, again.Since)
	}
}

// The reopen suite again, with the server restarted from its files before every open: what
// JetStream acknowledged survives the server, not only the store (journal numbering after a
// trim included).
func TestReopenAfterServerRestart(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T, dir string) store.Store {
		srv, err := natsserver.NewServer(&natsserver.Options{
			Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
			MaxPayload: jetstream.MinMaxPayload,
		})
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("in-process server not ready within 10s")
		}
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		s, err := jetstream.Open(t.Context(), nc, jetstream.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return &restarting{Store: s, stop: func() {
			nc.Close()
			srv.Shutdown()
			srv.WaitForShutdown()
		}}
	})
}

// restarting is a store whose Close also stops its server.
type restarting struct {
	*jetstream.Store
	stop func()
	once sync.Once
}

func (r *restarting) Close() error {
	err := r.Store.Close()
	r.once.Do(r.stop)
	return err
}

// A server whose max_payload cannot hold a 1 MiB event is refused at Open, with what to set.
func TestOpenRefusesSmallMaxPayload(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("in-process server not ready within 10s")
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, err = jetstream.Open(t.Context(), nc, jetstream.Options{})
	if err == nil || !strings.Contains(err.Error(), "max_payload: 4MB") {
		t.Errorf("Open on a server with the default max_payload = %v, want an error saying to set max_payload: 4MB", err)
	}
}

// The largest event a topic accepts (1 MiB) is appended, parked (even many of it) and read
// back: a parked event's copy of its event is a message of its own, not part of the
// subscription's record.
func TestLargeEvents(t *testing.T) {
	ctx := t.Context()
	nc, p := connect(t), newPrefix(t)
	s := open(t, nc, p)
	defer s.Close()
	big := &schemas.Event{ID: "big", Type: "T", Raw: []byte(`{"data":"` + strings.Repeat("x", 1<<20-12) + `"}`)}
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "t", "sub", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "t", time.Unix(1, 0), []*schemas.Event{big, big}); err != nil {
		t.Fatalf("Append of two 1 MiB events: %v", err)
	}
	var put []store.Parked
	for seq := uint64(1); seq <= 5; seq++ { // 5 MiB of parked events, more than one message holds
		put = append(put, store.Parked{Seq: seq, Event: big, Attempts: 1})
	}
	if err := s.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 3, Put: put}); err != nil {
		t.Fatalf("parking five 1 MiB events: %v", err)
	}
	if err := s.UpdateSubscription(ctx, "t", "sub", store.Update{Delete: []uint64{2}, Put: []store.Parked{{Seq: 3, Event: big, Attempts: 2}}}); err != nil {
		t.Fatalf("updating parked events: %v", err)
	}
	// A new store on the same prefix reads them back.
	s2 := open(t, nc, p)
	defer s2.Close()
	st, err := s2.LoadSubscription(ctx, "t", "sub")
	if err != nil {
		t.Fatalf("LoadSubscription: %v", err)
	}
	var seqs []uint64
	for _, pk := range st.Parked {
		seqs = append(seqs, pk.Seq)
	}
	if fmt.Sprint(seqs) != "[1 3 4 5]" || st.Parked[1].Attempts != 2 {
		t.Fatalf("parked seqs = %v, attempts of 3 = %d; want [1 3 4 5] and 2", seqs, st.Parked[1].Attempts)
	}
	for _, pk := range st.Parked {
		if pk.Event == nil || pk.Event.ID != "big" || len(pk.Event.Raw) != len(big.Raw) {
			t.Errorf("parked %d lost its event", pk.Seq)
		}
	}
	got, err := s2.Read(ctx, "t", 1, 10)
	if err != nil || len(got) != 2 || len(got[1].Event.Raw) != len(big.Raw) {
		t.Errorf("Read = %d entries, %v; want the two 1 MiB events", len(got), err)
	}
	// Only the four still parked are kept, and deleting the topic removes them.
	js, _ := njs.New(nc)
	parkedMsgs := func() uint64 {
		t.Helper()
		str, err := js.Stream(ctx, p+"_parked")
		if err != nil {
			t.Fatal(err)
		}
		return str.CachedInfo().State.Msgs
	}
	if n := parkedMsgs(); n != 4 {
		t.Errorf("parked stream holds %d messages, want 4", n)
	}
	if err := s2.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if n := parkedMsgs(); n != 0 {
		t.Errorf("parked stream holds %d messages after DeleteTopic, want 0", n)
	}
}

// An Append of as many events as a publish request may hold (5000) gets them all numbered in
// one run, beside concurrent small Appends.
func TestAppendLargeBatch(t *testing.T) {
	ctx := t.Context()
	s := open(t, connect(t), newPrefix(t))
	defer s.Close()
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	evs := make([]*schemas.Event, 5000)
	for i := range evs {
		evs[i] = &schemas.Event{ID: fmt.Sprint(i)}
	}
	var wg sync.WaitGroup
	lasts := make([]uint64, 3)
	errs := make([]error, 3)
	for i := range lasts {
		wg.Go(func() { lasts[i], errs[i] = s.Append(ctx, "t", time.Unix(1, 0), evs) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Append %d of 5000 events: %v", i, err)
		}
		got, err := s.Read(ctx, "t", lasts[i]-4999, 5000)
		if err != nil || len(got) != 5000 {
			t.Fatalf("Read of Append %d = %d entries, %v; want 5000", i, len(got), err)
		}
		for j, e := range got {
			if e.Event.ID != fmt.Sprint(j) {
				t.Fatalf("Append %d: entry %d holds event %s, want %d: its events are not contiguous", i, e.Seq, e.Event.ID, j)
			}
		}
	}
}

// Three stores (three cluster nodes) appending to one topic at the same time: a pipeline
// refused whole is published again after the new end, however often the writers refuse each
// other, so no Append fails for it. (A pipeline whose first messages were stored before
// another writer's came in between is refused from there on: that Append fails, with a
// prefix of it stored, as the contract allows; it is rare and not counted here.)
func TestAppendsOfSeveralWritersAtOnce(t *testing.T) {
	ctx := t.Context()
	p := newPrefix(t)
	var stores []*jetstream.Store
	for range 3 {
		s := open(t, connect(t), p) // a connection each, as nodes have
		defer s.Close()
		stores = append(stores, s)
	}
	if err := stores[0].PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	const appends, size = 300, 5
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range appends {
				var evs []*schemas.Event
				for k := range size {
					evs = append(evs, &schemas.Event{ID: fmt.Sprintf("%d-%d-%d", i, j, k)})
				}
				if _, err := s.Append(ctx, "t", time.Unix(1, 0), evs); err != nil && !strings.Contains(err.Error(), "wrong last msg ID") {
					if failed.Add(1) == 1 {
						t.Errorf("Append of writer %d: %v", i, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d Appends failed", n, 3*appends)
	}
}
