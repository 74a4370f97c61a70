package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/testkit"
)

// TestMembershipListingsAreCompleteWhileMembersRenew lists a members bucket (three NATS
// servers, three replicas) over and over while every key in it is renewed all the time, as
// the nodes' rounds do, and checks that no listing leaves a member out. A bare key watch's
// end marker comes before every key in some of such listings (the server's pending count is
// not monotonic while the bucket is written): a live node missing from a view. It makes up
// to 600 listings, or as many as 20 s allow.
func TestMembershipListingsAreCompleteWhileMembersRenew(t *testing.T) {
	if testing.Short() {
		t.Skip("three NATS servers and up to 20 s of listings; skipped with -short")
	}
	c := testkit.StartNATSCluster(t, 3)
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var kv jetstream.KeyValue
	if err := cluster.UntilLeader(ctx, func(ctx context.Context) (err error) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LIST_members", History: 1, TTL: time.Minute, Storage: jetstream.FileStorage, Replicas: 3})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	const members = 24
	var all []string
	for i := range members {
		all = append(all, fmt.Sprintf("node-%02d", i))
		if _, err := kv.Put(ctx, all[i], []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for {
				for i := w; i < members; i += 4 {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := kv.Put(context.Background(), all[i], []byte("x")); err != nil {
						t.Errorf("renewing %s: %v", all[i], err)
						return
					}
				}
			}
		})
	}
	defer func() {
		close(stop)
		writers.Wait()
	}()
	stored := cluster.StreamKeys(js, kv)
	deadline := time.Now().Add(20 * time.Second)
	partial, made := 0, 0
	for ; made < 600 && time.Now().Before(deadline); made++ {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		keys, err := cluster.ListKeys(lctx, kv, stored)
		cancel()
		if err != nil {
			t.Fatalf("listing %d: %v", made, err)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, all) {
			partial++
			if partial <= 3 {
				t.Logf("listing %d has %d of %d members", made, len(keys), members)
			}
		}
	}
	if partial > 0 {
		t.Errorf("%d of %d listings left live members out", partial, made)
	}
}
