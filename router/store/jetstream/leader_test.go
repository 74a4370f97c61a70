package jetstream_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/testkit"
)

// TestReplicatedReadsGoThroughTheLeader checks that a store with three replicas creates its
// streams and buckets without direct gets, which a lagging follower may answer (a subscription
// state one revision old, a parked event's copy or a journal entry "not found"), and that a
// single replica keeps them.
func TestReplicatedReadsGoThroughTheLeader(t *testing.T) {
	c := testkit.StartNATSCluster(t, 3)
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx := context.Background()
	for _, tt := range []struct {
		prefix   string
		replicas int
		direct   bool
	}{{"R3", 3, false}, {"R1", 1, true}} {
		s, err := jetstream.Open(ctx, nc, jetstream.Options{Prefix: tt.prefix, Replicas: tt.replicas})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutTopic(ctx, "orders", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if err := s.PutSubscription(ctx, "orders", "billing", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadSubscription(ctx, "orders", "billing"); err != nil {
			t.Fatal(err)
		}
		js, err := njs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"KV_" + tt.prefix + "_meta", "KV_" + tt.prefix + "_deadletters", "KV_" + tt.prefix + "_history", tt.prefix + "_parked", tt.prefix + "_journal_orders"} {
			str, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := str.CachedInfo().Config.AllowDirect; got != tt.direct {
				t.Errorf("%d replicas: stream %s allows direct gets: %v, want %v", tt.replicas, name, got, tt.direct)
			}
		}
		_ = s.Close()
	}
}
