package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// racedLooks is a meta bucket whose first Get of key that finds nothing runs race (once)
// before it answers: another node's writes landing between this store's look for the key and
// what it does next.
type racedLooks struct {
	jetstream.KeyValue
	key  string
	race func()
}

func (r *racedLooks) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := r.KeyValue.Get(ctx, key)
	if race := r.race; race != nil && key == r.key && errors.Is(err, jetstream.ErrKeyNotFound) {
		r.race = nil
		race()
	}
	return e, err
}

// racedTopicPurges is a meta bucket whose first Purge of key runs race (once) after it: another
// node's writes landing just after a delete purged the topic's definition.
type racedTopicPurges struct {
	jetstream.KeyValue
	key  string
	race func()
}

func (r *racedTopicPurges) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	err := r.KeyValue.Purge(ctx, key, opts...)
	if race := r.race; race != nil && key == r.key && err == nil {
		r.race = nil
		race()
	}
	return err
}

// noticedWatches is a meta bucket that closes watching (once) when a watch of key has started:
// the store waits for another node's claim on the name to end.
type noticedWatches struct {
	jetstream.KeyValue
	key      string
	watching chan struct{}
}

func (n *noticedWatches) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := n.KeyValue.Watch(ctx, keys, opts...)
	if keys == n.key && n.watching != nil {
		close(n.watching)
		n.watching = nil
	}
	return w, err
}

// twoNodes is a store and a second one on the same prefix (another node).
func twoNodes(t *testing.T) (mine, other *Store, ctx context.Context) {
	t.Helper()
	mine, _ = holesStore(t, 1)
	ctx = bounded(t)
	other, err := Open(ctx, mine.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	return mine, other, ctx
}

// acceptEvents creates topic on s with a subscription and appends n events to it, as a node
// that answered the create and n publishes (each 200).
func acceptEvents(ctx context.Context, s *Store, topic string, n int) error {
	if err := s.CreateTopic(ctx, topic, []byte(`other`)); err != nil {
		return fmt.Errorf("the other node's create: %w", err)
	}
	if err := s.CreateSubscription(ctx, topic, "sub", []byte(`sub`)); err != nil {
		return fmt.Errorf("the other node's subscription: %w", err)
	}
	for i := range n {
		if _, err := s.Append(ctx, topic, time.Unix(1, 0), []*schemas.Event{{ID: fmt.Sprintf("e%d", i+1)}}); err != nil {
			return fmt.Errorf("the other node's publish: %w", err)
		}
	}
	return nil
}

// requireAccepted fails t unless topic holds what acceptEvents stored: the other node's
// definition, subscription and n events.
func requireAccepted(ctx context.Context, t *testing.T, s *Store, topic string, n int) {
	t.Helper()
	if last, err := s.LastSeq(ctx, topic); err != nil || last != uint64(n) {
		t.Errorf("LastSeq = %d, %v; want the %d events the other node accepted", last, err, n)
	}
	if es, err := s.Read(ctx, topic, 1, 10); err != nil || len(es) != n {
		t.Errorf("Read = %d entries, %v; want the %d events the other node accepted", len(es), err, n)
	}
	if defs, err := s.Subscriptions(ctx, topic); err != nil || len(defs) != 1 || string(defs[0].Spec) != "sub" {
		t.Errorf("Subscriptions = %+v, %v; want the other node's subscription", defs, err)
	}
}

// TestTopicCreateThatLostLeavesTheOtherNodesTopic: this node looks for the topic and finds
// none; before it goes on, another node creates the topic, a subscription, and accepts
// publishes. This node's create must remove nothing of that topic: its leftovers-of-a-delete
// cleanup once deleted the other node's journal stream and subscription records, and the
// events that node had answered 200 were gone.
func TestTopicCreateThatLostLeavesTheOtherNodesTopic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		create  bool
		wantErr error // nil: the call succeeds
		spec    string
	}{
		{name: "CreateTopic", create: true, wantErr: store.ErrExists, spec: "other"},
		{name: "PutTopic", create: false, spec: "mine"}, // a put replaces the definition, nothing else
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, other, ctx := twoNodes(t)
			var raceErr error
			s.meta = &racedLooks{KeyValue: s.meta, key: topicKey("fresh"), race: func() {
				raceErr = acceptEvents(ctx, other, "fresh", 3)
			}}
			var err error
			if tc.create {
				err = s.CreateTopic(ctx, "fresh", []byte(`mine`))
			} else {
				err = s.PutTopic(ctx, "fresh", []byte(`mine`))
			}
			if raceErr != nil {
				t.Fatal(raceErr)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Errorf("%s = %v, want %v", tc.name, err, tc.wantErr)
			}
			requireAccepted(ctx, t, other, "fresh", 3)
			if defs, err := other.Topics(ctx); err != nil || len(defs) != 2 || defs[0].Name != "fresh" || string(defs[0].Spec) != tc.spec {
				t.Errorf("Topics = %+v, %v; want fresh with spec %q", defs, err, tc.spec)
			}
		})
	}
}

// TestTopicDeleteEndsBeforeTheNameIsCreatedAgain: another node creates the topic again, takes
// a subscription and accepts publishes as soon as this node's delete lets the name go. The
// delete must remove nothing of the new topic: it once purged the definition first and removed
// the journal stream and subscription records after, which were the new topic's by then.
func TestTopicDeleteEndsBeforeTheNameIsCreatedAgain(t *testing.T) {
	s, other, ctx := twoNodes(t)
	var raceErr error
	s.meta = &racedTopicPurges{KeyValue: s.meta, key: topicKey("orders"), race: func() {
		raceErr = acceptEvents(ctx, other, "orders", 3)
	}}
	if err := s.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if raceErr != nil {
		t.Fatal(raceErr)
	}
	requireAccepted(ctx, t, other, "orders", 3)
}

// noticedClaims is a meta bucket that runs claimed (once) after its first Create of key wrote:
// this store holds the name's claim and has done nothing else yet.
type noticedClaims struct {
	jetstream.KeyValue
	key     string
	claimed func()
}

func (n *noticedClaims) Create(ctx context.Context, key string, v []byte) (uint64, error) {
	rev, err := n.KeyValue.Create(ctx, key, v)
	if f := n.claimed; f != nil && key == n.key && err == nil {
		n.claimed = nil
		f()
	}
	return rev, err
}

// TestACreateWaitsForAnotherNodesClaim: while this node holds the claim of a topic it creates,
// every other node takes the name for one without a topic (no listing, no subscription), and
// another node's create waits for the claim and then fails with store.ErrExists, removing
// nothing.
func TestACreateWaitsForAnotherNodesClaim(t *testing.T) {
	s, other, ctx := twoNodes(t)
	watching := make(chan struct{})
	other.meta = &noticedWatches{KeyValue: other.meta, key: topicKey("fresh"), watching: watching}
	otherErr := make(chan error, 1)
	var during []string
	s.meta = &noticedClaims{KeyValue: s.meta, key: topicKey("fresh"), claimed: func() {
		defs, err := other.Topics(ctx)
		if err != nil || len(defs) != 1 {
			during = append(during, fmt.Sprintf("Topics while claimed = %+v, %v; want orders alone", defs, err))
		}
		if err := other.PutSubscription(ctx, "fresh", "sub", []byte(`sub`)); !errors.Is(err, store.ErrNotFound) {
			during = append(during, fmt.Sprintf("PutSubscription while claimed = %v, want store.ErrNotFound", err))
		}
		go func() { otherErr <- other.CreateTopic(ctx, "fresh", []byte(`other`)) }()
		<-watching
	}}
	if err := s.CreateTopic(ctx, "fresh", []byte(`mine`)); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	for _, d := range during {
		t.Error(d)
	}
	if err := <-otherErr; !errors.Is(err, store.ErrExists) {
		t.Errorf("the other node's CreateTopic = %v, want store.ErrExists", err)
	}
	if _, err := s.Append(ctx, "fresh", time.Unix(1, 0), []*schemas.Event{{ID: "e1"}}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	if defs, err := other.Topics(ctx); err != nil || len(defs) != 2 || string(defs[0].Spec) != "mine" {
		t.Errorf("Topics = %+v, %v; want fresh as this node created it", defs, err)
	}
}

// TestACreateGivesUpOnAClaimThatHolds: a create that waits for another node's claim fails,
// when its context ends first, with store.ErrFenced and a message saying what is going on.
func TestACreateGivesUpOnAClaimThatHolds(t *testing.T) {
	s, other, ctx := twoNodes(t)
	if _, err := s.claimTopic(ctx, "fresh", 0, claimCreate); err != nil {
		t.Fatal(err)
	}
	watching := make(chan struct{})
	other.meta = &noticedWatches{KeyValue: other.meta, key: topicKey("fresh"), watching: watching}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- other.CreateTopic(cctx, "fresh", []byte(`other`)) }()
	<-watching
	cancel()
	err := <-errc
	if !errors.Is(err, store.ErrFenced) || !strings.Contains(err.Error(), "being created by another node") {
		t.Errorf("CreateTopic = %v, want store.ErrFenced saying the topic is being created by another node", err)
	}
}

// TestAnExpiredClaimIsTakenOver: a node that crashed in the middle of a delete (or a create)
// leaves its claim on the name: readers take the name for one without a topic, and once the
// claim expired the next create takes it over, removes what the topic held and creates it.
func TestAnExpiredClaimIsTakenOver(t *testing.T) {
	for _, kind := range []claimKind{claimDelete, claimCreate} {
		t.Run(kind.String(), func(t *testing.T) {
			s, other, ctx := twoNodes(t)
			e, err := s.meta.Get(ctx, topicKey("orders"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.meta.Update(ctx, topicKey("orders"), appendClaim(nil, kind, 7, time.Now().Add(-time.Second)), e.Revision()); err != nil {
				t.Fatal(err)
			}
			if defs, err := other.Topics(ctx); err != nil || len(defs) != 0 {
				t.Errorf("Topics = %+v, %v; want none (orders is claimed)", defs, err)
			}
			if err := other.DeleteTopic(ctx, "orders"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("DeleteTopic of a claimed name = %v, want store.ErrNotFound", err)
			}
			if damaged, _, err := other.DefinitionDamaged(ctx, "orders", ""); err != nil || damaged {
				t.Errorf("DefinitionDamaged = %v, %v; a claim is no damage", damaged, err)
			}
			if err := other.CreateTopic(ctx, "orders", []byte(`again`)); err != nil {
				t.Fatalf("CreateTopic over an expired claim: %v", err)
			}
			if last, err := other.LastSeq(ctx, "orders"); err != nil || last != 0 {
				t.Errorf("LastSeq = %d, %v; want 0 (the earlier life's event removed)", last, err)
			}
			if defs, err := s.Topics(ctx); err != nil || len(defs) != 1 || string(defs[0].Spec) != "again" {
				t.Errorf("Topics = %+v, %v; want orders created again", defs, err)
			}
		})
	}
}

func TestDecodeTopic(t *testing.T) {
	exp := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		name    string
		val     []byte
		want    topicValue
		wantErr bool
	}{
		{name: "definition", val: appendOpaque(nil, []byte(`{}`)), want: topicValue{spec: []byte(`{}`)}},
		{name: "claim", val: appendClaim(nil, claimDelete, 42, exp), want: topicValue{claim: claimDelete, id: 42, expires: exp}},
		{name: "bad kind", val: appendClaim(nil, 9, 42, exp), wantErr: true},
		{name: "cut short", val: appendClaim(nil, claimCreate, 1<<40, exp)[:3], wantErr: true},
		{name: "bytes after", val: append(appendClaim(nil, claimCreate, 42, exp), 0), wantErr: true},
		{name: "empty", val: nil, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeTopic(tc.val)
			if (err != nil) != tc.wantErr {
				t.Fatalf("decodeTopic = %+v, %v; want error %v", got, err, tc.wantErr)
			}
			if err == nil && (string(got.spec) != string(tc.want.spec) || got.claim != tc.want.claim || got.id != tc.want.id || !got.expires.Equal(tc.want.expires)) {
				t.Errorf("decodeTopic = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// racedUpdates is a meta bucket whose first Update of key lets another writer write first
// (race, run once).
type racedUpdates struct {
	jetstream.KeyValue
	key  string
	race func()
}

func (r *racedUpdates) Update(ctx context.Context, key string, v []byte, last uint64) (uint64, error) {
	if race := r.race; race != nil && key == r.key {
		r.race = nil
		race()
	}
	return r.KeyValue.Update(ctx, key, v, last)
}

// TestDeleteTopicReadsAgainAfterAKeyRotation: a delete claims the name on the revision of the
// definition it read; another node's definition write in between (a key rotation) makes it
// read the definition again and delete the topic, rather than fail.
func TestDeleteTopicReadsAgainAfterAKeyRotation(t *testing.T) {
	s, other, ctx := twoNodes(t)
	var raceErr error
	s.meta = &racedUpdates{KeyValue: s.meta, key: topicKey("orders"), race: func() {
		raceErr = other.PutTopic(ctx, "orders", []byte(`rotated`))
	}}
	if err := s.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("DeleteTopic after another node's key rotation: %v", err)
	}
	if raceErr != nil {
		t.Fatal(raceErr)
	}
	if defs, err := other.Topics(ctx); err != nil || len(defs) != 0 {
		t.Errorf("Topics = %+v, %v; want none", defs, err)
	}
}
