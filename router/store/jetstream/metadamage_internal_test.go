package jetstream

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/store"
)

func defNames(defs []store.Definition) []string {
	var out []string
	for _, d := range defs {
		out = append(out, d.Name)
	}
	return out
}

// metaDamageStore returns a store with topics "bad", "orders" (events 1 to 4, of which the
// journal holds 2 to 4) and "zeta", and subscriptions "gone", "good" and "state" of "orders".
func metaDamageStore(t *testing.T) *Store {
	t.Helper()
	ctx := t.Context()
	s, _ := holesStore(t, 4)
	for _, name := range []string{"bad", "zeta"} {
		if err := s.PutTopic(ctx, name, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"good", "gone", "state"} {
		if err := s.PutSubscription(ctx, "orders", name, []byte(`{"`+name+`":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Trim(ctx, "orders", 1); err != nil {
		t.Fatal(err)
	}
	return s
}

// damageMeta writes val to key of the meta bucket, as a foreign writer would.
func damageMeta(t *testing.T, s *Store, key string, val []byte) {
	t.Helper()
	if _, err := s.meta.Put(t.Context(), key, val); err != nil {
		t.Fatal(err)
	}
}

// checkDamageReported checks that s counted and logged one piece of damage of kind, saying
// every one of wants.
func checkDamageReported(t *testing.T, s *Store, logs *strings.Builder, counts map[string]int, kind string, wants ...string) {
	t.Helper()
	if counts[kind] != 1 || len(counts) != 1 || s.Health().Corruptions != 1 {
		t.Errorf("damage counted %v, Health().Corruptions = %d; want 1 of kind %q", counts, s.Health().Corruptions, kind)
	}
	out := logs.String()
	if n := strings.Count(out, "level=ERROR"); n != 1 {
		t.Errorf("%d ERRORs logged, want one:\n%s", n, out)
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("the ERROR does not say %q:\n%s", want, out)
		}
	}
}

// A topic definition that does not decode is left out of Topics, which lists the others
// (where the listing failed, and the router with it), logged and counted once. Its name stays
// taken until DeleteTopic removes it.
func TestDamagedTopicDefinitionIsLeftOut(t *testing.T) {
	ctx := t.Context()
	s := metaDamageStore(t)
	logs, counts := damageLog(s)
	damageMeta(t, s, topicKey("bad"), []byte{})

	for range 2 { // reported once, however often listed
		topics, err := s.Topics(ctx)
		if got := defNames(topics); err != nil || !slices.Equal(got, []string{"orders", "zeta"}) {
			t.Fatalf("Topics = %v, %v; want [orders zeta], the damaged topic left out", got, err)
		}
	}
	checkDamageReported(t, s, logs, counts, DamageDefinition, "topic=bad", "does not decode", "egrid topic delete --name bad", "HOLES_meta")

	if err := s.PutTopic(ctx, "bad", []byte(`{}`)); !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), "egrid topic delete --name bad") {
		t.Errorf("PutTopic over a damaged definition = %v, want ErrDamaged saying to delete it", err)
	}
	if err := s.DeleteTopic(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "bad", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if topics, err := s.Topics(ctx); err != nil || len(topics) != 3 {
		t.Errorf("Topics after the name was created again = %v, %v; want 3", defNames(topics), err)
	}
}

// A subscription record whose definition does not decode is left out of Subscriptions and
// Cursors, which list the others (where both failed for the whole topic), logged and counted
// once. Its name stays taken until DeleteSubscription removes it.
func TestDamagedSubscriptionDefinitionIsLeftOut(t *testing.T) {
	ctx := t.Context()
	s := metaDamageStore(t)
	logs, counts := damageLog(s)
	damageMeta(t, s, subKey("orders", "gone"), []byte{subRecordV2, 4})

	for range 2 {
		subs, err := s.Subscriptions(ctx, "orders")
		if got := defNames(subs); err != nil || !slices.Equal(got, []string{"good", "state"}) {
			t.Fatalf("Subscriptions = %v, %v; want [good state], the damaged definition left out", got, err)
		}
		cursors, err := s.Cursors(ctx, "orders")
		if _, has := cursors["gone"]; err != nil || len(cursors) != 2 || has {
			t.Fatalf("Cursors = %v, %v; want good's and state's", cursors, err)
		}
	}
	if _, err := s.LoadSubscription(ctx, "orders", "gone"); !errors.Is(err, store.ErrDamaged) {
		t.Errorf("LoadSubscription of a damaged definition = %v, want ErrDamaged", err)
	}
	checkDamageReported(t, s, logs, counts, DamageDefinition, "topic=orders", "subscription=gone", "does not decode",
		"egrid event-subscription delete --topic orders --name gone", "HOLES_meta")

	if err := s.PutSubscription(ctx, "orders", "gone", []byte(`{}`)); !errors.Is(err, store.ErrDamaged) {
		t.Errorf("PutSubscription over a damaged definition = %v, want ErrDamaged", err)
	}
	if err := s.DeleteSubscription(ctx, "orders", "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "orders", "gone", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if st, err := s.LoadSubscription(ctx, "orders", "gone"); err != nil || st.Cursor != 4 {
		t.Errorf("subscription created again: %+v, %v; want cursor 4 (the journal's end)", st, err)
	}
}

// A subscription record whose definition decodes but whose state does not is listed, and
// loads with a fresh state written back: its cursor just before the oldest event the journal
// holds (every event it had not settled is delivered again, none skipped), nothing parked and
// a new epoch, so a late write of the old state is refused. Where its load failed at every
// start. Logged and counted once.
func TestDamagedSubscriptionStateStartsAtTheJournalsOldest(t *testing.T) {
	ctx := t.Context()
	s := metaDamageStore(t)
	logs, counts := damageLog(s)
	old, err := s.LoadSubscription(ctx, "orders", "state")
	if err != nil {
		t.Fatal(err)
	}
	// Its head (cursor, epoch, definition) intact, its parked events cut short.
	rec := appendSubRecord(nil, &subRecord{epoch: old.Epoch, spec: []byte(`{"state":1}`), cursor: 4,
		parked: []store.Parked{{Seq: 3, Attempts: 2}, {Seq: 4, Attempts: 1}}})
	damageMeta(t, s, subKey("orders", "state"), rec[:len(rec)-3])

	subs, err := s.Subscriptions(ctx, "orders")
	if got := defNames(subs); err != nil || !slices.Equal(got, []string{"gone", "good", "state"}) || string(subs[2].Spec) != `{"state":1}` {
		t.Fatalf("Subscriptions = %v, %v; want all three, state's definition read", got, err)
	}
	for range 2 {
		st, err := s.LoadSubscription(ctx, "orders", "state")
		if err != nil {
			t.Fatalf("LoadSubscription of the subscription whose state does not decode: %v", err)
		}
		if st.Cursor != 1 || len(st.Parked) != 0 || st.Probation != nil || st.Epoch == old.Epoch || st.Epoch <= legacyEpoch {
			t.Fatalf("state = %+v; want cursor 1 (the oldest event held is 2), nothing parked, a new epoch (not %d)", st, old.Epoch)
		}
	}
	if c, err := s.Cursors(ctx, "orders"); err != nil || c["state"] != 1 {
		t.Errorf("Cursors = %v, %v; want state's at 1, the fresh state written", c, err)
	}
	err = s.UpdateSubscription(ctx, "orders", "state", store.Update{Epoch: old.Epoch, Cursor: 4})
	if !errors.Is(err, store.ErrStaleEpoch) {
		t.Errorf("update of the epoch before the damage = %v, want ErrStaleEpoch", err)
	}
	checkDamageReported(t, s, logs, counts, DamageEntry, "topic=orders", "subscription=state", "state does not decode", "fromSeq=2", "at least once", "HOLES_meta")
}

// DeleteDamaged deletes a damaged definition only while the name holds the damaged value
// DefinitionDamaged found: one another writer (another node) wrote over it in between is left
// as it is, and the delete fails wrapping store.ErrChanged; the damaged value itself it
// deletes, with what is stored under the name.
func TestDeleteDamagedLeavesADefinitionWrittenSinceTheProbe(t *testing.T) {
	ctx := t.Context()
	s := metaDamageStore(t)
	damageLog(s)
	goodSub, err := s.meta.Get(ctx, subKey("orders", "gone"))
	if err != nil {
		t.Fatal(err)
	}
	goodTopic, err := s.meta.Get(ctx, topicKey("bad"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, key, topic, sub string
		good                  []byte
	}{
		{what: "subscription", key: subKey("orders", "gone"), topic: "orders", sub: "gone", good: goodSub.Value()},
		{what: "topic", key: topicKey("bad"), topic: "bad", good: goodTopic.Value()},
	} {
		damageMeta(t, s, c.key, []byte{subRecordV2, 4})
		damaged, rev, err := s.DefinitionDamaged(ctx, c.topic, c.sub)
		if err != nil || !damaged || rev == 0 {
			t.Fatalf("%s: DefinitionDamaged = %v, %d, %v; want damaged with its revision", c.what, damaged, rev, err)
		}
		damageMeta(t, s, c.key, c.good) // another node created the name again
		if err := s.DeleteDamaged(ctx, c.topic, c.sub, rev); !errors.Is(err, store.ErrChanged) || !strings.Contains(err.Error(), "nothing was deleted") {
			t.Errorf("%s: DeleteDamaged after the value was replaced = %v; want ErrChanged saying nothing was deleted", c.what, err)
		}
		if e, err := s.meta.Get(ctx, c.key); err != nil || string(e.Value()) != string(c.good) {
			t.Errorf("%s: the definition written after the probe is gone: %v", c.what, err)
		}
		if damaged, _, err := s.DefinitionDamaged(ctx, c.topic, c.sub); err != nil || damaged {
			t.Errorf("%s: DefinitionDamaged of the good definition = %v, %v; want false", c.what, damaged, err)
		}

		damageMeta(t, s, c.key, []byte{subRecordV2, 4})
		_, rev, err = s.DefinitionDamaged(ctx, c.topic, c.sub)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteDamaged(ctx, c.topic, c.sub, rev); err != nil {
			t.Fatalf("%s: DeleteDamaged of the damaged value: %v", c.what, err)
		}
		if _, err := s.meta.Get(ctx, c.key); err == nil {
			t.Errorf("%s: still stored after DeleteDamaged", c.what)
		}
		if err := s.DeleteDamaged(ctx, c.topic, c.sub, rev); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: DeleteDamaged again = %v, want ErrNotFound", c.what, err)
		}
	}
	if _, err := s.Topics(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "bad", []byte(`{}`)); err != nil {
		t.Errorf("PutTopic of the freed name: %v", err)
	}
	if err := s.PutSubscription(ctx, "orders", "gone", []byte(`{}`)); err != nil {
		t.Errorf("PutSubscription of the freed name: %v", err)
	}
}
