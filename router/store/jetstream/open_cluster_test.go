package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/testkit"
)

// TestClusterOpenTogether opens three stores with three replicas at once, each through its own
// NATS server, on a prefix the JetStream cluster has never seen, as three nodes started
// together do: each finds the buckets missing, the nodes race to create them, and the buckets
// have no leader for a moment after, and some of the nodes' calls go unanswered until their
// timeout (a try of 2 s here, shorter than the default 10 s, which failed the same way).
// Every open waits for them and succeeds.
func TestClusterOpenTogether(t *testing.T) {
	c := testkit.StartNATSCluster(t, 3)
	for round := range 3 {
		prefix := fmt.Sprintf("NEW%d", round)
		var wg sync.WaitGroup
		errs := make([]error, c.Size())
		for i := range c.Size() {
			nc, err := nats.Connect(c.ClientURL(i))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := jetstream.Open(context.Background(), nc, jetstream.Options{Prefix: prefix, Replicas: 3, Timeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
				if err != nil {
					errs[i] = err
					return
				}
				_ = s.Close()
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: node %d: %v", round, i, err)
			}
		}
	}
}

// TestOpenWithoutJetStreamFailsAtOnce opens the store on a NATS server without JetStream:
// waiting cannot heal that, so Open fails on its first try (it logs no wait) with an error
// that says JetStream is not enabled.
func TestOpenWithoutJetStreamFailsAtOnce(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: jetstream.MinMaxPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("in-process server not ready within 10s")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var logs strings.Builder
	_, err = jetstream.Open(context.Background(), nc, jetstream.Options{Prefix: "NOJS", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !errors.Is(err, njs.ErrJetStreamNotEnabled) {
		t.Fatalf("Open = %v, want an error wrapping %v", err, njs.ErrJetStreamNotEnabled)
	}
	if logs.Len() != 0 {
		t.Errorf("Open waited before failing:\n%s", logs.String())
	}
}
