package testkit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/testkit"
)

// connectJS connects to every server of c (the client fails over between them) and returns
// its JetStream context, with a short per-call timeout so a call without quorum fails fast.
func connectJS(t *testing.T, c *testkit.NATSCluster) njs.JetStream {
	t.Helper()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatalf("connecting to %s: %v", c.URL(), err)
	}
	t.Cleanup(nc.Close)
	if got := nc.MaxPayload(); got < jetstream.MinMaxPayload {
		t.Errorf("max_payload %d, want at least %d (a 1 MiB event is one message)", got, jetstream.MinMaxPayload)
	}
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// publishUntilAcked publishes one message, trying again (bounded) while the cluster elects a
// new leader after a server went away.
func publishUntilAcked(t *testing.T, js njs.JetStream, subject, body string) {
	t.Helper()
	var err error
	for range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = js.Publish(ctx, subject, []byte(body))
		cancel()
		if err == nil {
			return
		}
	}
	t.Fatalf("publishing %q: %v (200 tries)", body, err)
}

// A stream with three replicas on a three-server cluster keeps every acknowledged message and
// keeps accepting writes when one server is killed; with two of three gone it has no quorum
// and refuses them; after the restarts every server's copy has every message.
func TestNATSClusterR3StreamSurvivesAKilledServer(t *testing.T) {
	c := testkit.StartNATSCluster(t, 3)
	if c.Size() != 3 || len(c.URLs()) != 3 {
		t.Fatalf("Size %d, URLs %v: want 3 servers", c.Size(), c.URLs())
	}
	js := connectJS(t, c)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, njs.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"}, Replicas: 3}); err != nil {
		t.Fatalf("creating an R3 stream: %v", err)
	}
	const perPhase = 50
	for i := range perPhase {
		publishUntilAcked(t, js, "orders", fmt.Sprintf("before-%d", i))
	}

	c.Kill(0)
	if c.Running(0) || c.Server(0) != nil {
		t.Fatal("server 0 still runs after Kill")
	}
	for i := range perPhase {
		publishUntilAcked(t, js, "orders", fmt.Sprintf("one-down-%d", i))
	}

	c.Kill(1)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := js.Publish(short, "orders", []byte("no-quorum"))
	cancel()
	if err == nil {
		t.Fatal("a publish was acknowledged with two of three servers down: the stream is not replicated across the cluster")
	}

	c.Restart(1)
	c.Restart(0)
	if !c.Running(0) || !c.Running(1) {
		t.Fatal("servers not running after Restart")
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.WaitStream(wait, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	for i := range perPhase {
		publishUntilAcked(t, js, "orders", fmt.Sprintf("after-%d", i))
	}

	// Every acknowledged message is in the stream, in order.
	var want []string
	for _, phase := range []string{"before", "one-down", "after"} {
		for i := range perPhase {
			want = append(want, fmt.Sprintf("%s-%d", phase, i))
		}
	}
	s, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Errorf("stream info %+v: want a leader and two replicas", info.Cluster)
	}
	var got []string
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("reading message %d: %v", seq, err)
		}
		got = append(got, string(m.Data))
	}
	// A refused publish may still have been stored (JetStream's at-least-once); only the
	// acknowledged ones are required, in order.
	j := 0
	for _, g := range got {
		if j < len(want) && g == want[j] {
			j++
		}
	}
	if j != len(want) {
		t.Fatalf("the stream holds %d messages; acknowledged message %q is missing or out of order", len(got), want[j])
	}
}

// Restart keeps a server's client URL, and a client connected to all of them finds the
// cluster again when the server it used goes away.
func TestNATSClusterRestartKeepsURLs(t *testing.T) {
	c := testkit.StartNATSCluster(t, 3)
	before := c.URLs()
	nc, err := nats.Connect(c.ClientURL(2), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c.Kill(2)
	c.Restart(2)
	if after := c.URLs(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("URLs changed across a restart: %v, then %v", before, after)
	}
	// The client comes back on its own; a request round trip proves it.
	deadline := time.Now().Add(time.Minute)
	for nc.Status() != nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatalf("the client did not reconnect within a minute (status %v)", nc.Status())
		}
		if err := nc.FlushTimeout(100 * time.Millisecond); err == nil {
			break
		}
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatalf("round trip after the restart: %v", err)
	}
}

// A single server runs JetStream unclustered.
func TestNATSClusterOfOne(t *testing.T) {
	c := testkit.StartNATSCluster(t, 1)
	js := connectJS(t, c)
	if _, err := js.CreateStream(t.Context(), njs.StreamConfig{Name: "ONE", Subjects: []string{"one"}}); err != nil {
		t.Fatal(err)
	}
	publishUntilAcked(t, js, "one", "x")
}
