package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/testkit/brokertest"
)

// expiryRounds bounds TestMembershipListingRacingExpiryDoesNotStall: each round is one batch
// of member keys expiring while listings run.
const expiryRounds = 30

// TestMembershipListingRacingExpiryDoesNotStall lists a members bucket while its keys expire
// (nodes gone without releasing their membership, whose keys' TTL ends). A key the listing's
// watch counted as pending and that expires before it is delivered never comes, and with it
// the watch's end-of-listing marker; no member renewing its key meanwhile, the listing still
// ends, long before its deadline. Each round writes 40 member keys at once, which expire
// together, and lists the bucket from 4 goroutines until a listing finds it empty.
func TestMembershipListingRacingExpiryDoesNotStall(t *testing.T) {
	if testing.Short() {
		t.Skip("up to 30 rounds of a members bucket expiring; skipped with -short")
	}
	nc, err := nats.Connect(brokertest.StartNATS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const bucket = "EXPIRY_members"
	// A TTL as short as JetStream keeps: a round lasts about that long.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, TTL: 300 * time.Millisecond, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	stored := cluster.StreamKeys(js, kv)
	const members, listers, listings = 40, 4, 5000
	for round := range expiryRounds {
		// The keys are written back to back (published without waiting for each ack), so
		// they expire together: a listing under way when they do finds the rest of its keys
		// gone.
		acks := make([]jetstream.PubAckFuture, 0, members)
		for i := range members {
			a, err := js.PublishAsync(fmt.Sprintf("$KV.%s.node-%02d", bucket, i), []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, a)
		}
		for _, a := range acks {
			select {
			case <-a.Ok():
			case err := <-a.Err():
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		var mu sync.Mutex
		var stalled, failed error
		expired := 0
		var wg sync.WaitGroup
		for range listers {
			wg.Go(func() {
				for range listings {
					// A deadline far longer than a listing of a few dozen keys takes.
					lctx, cancel := context.WithTimeout(ctx, time.Second)
					keys, err := cluster.ListKeys(lctx, kv, stored)
					cancel()
					mu.Lock()
					switch {
					case errors.Is(err, context.DeadlineExceeded):
						stalled = err
					case err != nil:
						failed = err
					case len(keys) == 0:
						expired++
					}
					done := err != nil || len(keys) == 0
					mu.Unlock()
					if done {
						return
					}
				}
			})
		}
		wg.Wait()
		switch {
		case stalled != nil:
			t.Fatalf("round %d: a membership listing racing the members' expiry did not end before its deadline (the watch waiting for an expired key): %v", round, stalled)
		case failed != nil:
			t.Fatalf("round %d: listing the members: %v", round, failed)
		case expired < listers:
			t.Fatalf("round %d: the members' keys (TTL 300ms) had not expired after %d listings", round, listings)
		}
	}
}
