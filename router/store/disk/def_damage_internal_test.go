package disk

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// writeDefStore writes, in dir (with secret key key, nil for none), topics orders and broken
// with subscriptions billing and hook each and three events each, then sets damage(k, v) as
// the value of every key k for which damage returns one, and closes the store.
func writeDefStore(t *testing.T, dir string, key []byte, damage func(k, v []byte) []byte) {
	t.Helper()
	ctx := t.Context()
	s, err := Open(dir, Options{SecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, topic := range []string{"orders", "broken"} {
		if err := s.PutTopic(ctx, topic, []byte(`{"topic":"`+topic+`"}`)); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"billing", "hook"} {
			if err := s.PutSubscription(ctx, topic, name, []byte(`{"sub":"`+name+`"}`)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			ev := &schemas.Event{ID: fmt.Sprint(topic, i), Raw: []byte(`{}`)}
			if _, err := s.Append(ctx, topic, time.Now(), []*schemas.Event{ev}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.UpdateSubscription(ctx, topic, "billing", store.Update{Cursor: 2}); err != nil {
			t.Fatal(err)
		}
	}
	b := s.gen.db.NewBatch()
	for _, p := range []byte{prefixTopic, prefixSub} {
		err := scan(s.gen.db, []byte{p}, []byte{p + 1}, func(k, v []byte) error {
			if d := damage(k, v); d != nil {
				return b.Set(k, d, nil)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// openCounting opens dir with a logger into logs and a count of damage by kind.
func openCounting(t *testing.T, dir string, key []byte, logs *lockedBuffer, counts map[string]int) *Store {
	t.Helper()
	s, err := Open(dir, Options{SecretKey: key, Logger: slog.New(slog.NewTextHandler(logs, nil)), OnCorruption: func(kind string) { counts[kind]++ }})
	if err != nil {
		t.Fatalf("Open: %v; want the store open without the damaged definition", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ids returns the ids of the events topic's journal holds.
func journalIDs(t *testing.T, s *Store, topic string) string {
	t.Helper()
	got, err := s.Read(t.Context(), topic, 1, 100)
	if err != nil {
		t.Fatalf("Read %s: %v", topic, err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, e.Event.ID)
	}
	return strings.Join(ids, ",")
}

func names(defs []store.Definition) string {
	var n []string
	for _, d := range defs {
		n = append(n, d.Name)
	}
	return strings.Join(n, ",")
}

// A topic definition whose value does not decode costs that topic alone: the store opens, the
// other topic's journal and subscriptions are served, and the damaged one is reported once (an
// ERROR naming it and saying what to do, a count of kind definition, a problem of egrid store
// check). Its name stays taken: PutTopic refuses it (in any case) with store.ErrDamaged
// rather than write a new definition over the remains; DeleteTopic removes it, with its
// journal, subscriptions and their state when the damaged value still gives its id, and the
// name can be created again, empty. Before, Open failed: one damaged definition stopped every
// topic.
func TestDamagedTopicDefinitionIsLeftOut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		key     []byte
		openKey []byte // the key given at the starts after the damage, when not key
		damage  func(v []byte) []byte
		idKnown bool
	}{
		{name: "unknown version", damage: func(v []byte) []byte { return append([]byte{0x7f}, v[1:]...) }, idKnown: true},
		// A store with no key check never sealed a definition (the first seal writes it):
		// one that looks sealed is damaged, whether a key is given or not. Before, Open
		// refused, saying to give the key the definitions were sealed with.
		{name: "looks sealed, store never sealed", damage: func(v []byte) []byte { return append([]byte{formatSealed}, v[1:]...) }, idKnown: true},
		{name: "looks sealed, store never sealed, key given now", openKey: bytes.Repeat([]byte{1}, 32),
			damage: func(v []byte) []byte { return append([]byte{formatSealed}, v[1:]...) }, idKnown: true},
		{name: "cut short", damage: func([]byte) []byte { return []byte{formatV1} }},
		{name: "sealed, does not open", key: bytes.Repeat([]byte{1}, 32), damage: func(v []byte) []byte {
			d := bytes.Clone(v)
			d[len(d)-1] ^= 0xff
			return d
		}, idKnown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			writeDefStore(t, dir, tc.key, func(k, v []byte) []byte {
				if bytes.Equal(k, nameKey(prefixTopic, "broken")) {
					return tc.damage(v)
				}
				return nil
			})
			key := tc.key
			if tc.openKey != nil {
				key = tc.openKey
			}

			r, err := Check(ctx, dir, key, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			// Without its id, its two subscriptions cannot be told to be its: each is
			// reported as stored under a topic with no definition.
			want := 1
			if !tc.idKnown {
				want = 3
			}
			if len(r.Problems) != want || !errors.Is(r.Problems[0], ErrCorrupt) || !strings.Contains(r.Problems[0].Error(), `topic "broken": its definition is damaged`) {
				t.Errorf("Check problems = %v; want %d, the first naming topic broken", r.Problems, want)
			}
			if r.Topics != 1 || r.Subscriptions != 2 || r.JournalEntries != 3 {
				t.Errorf("Check counted %+v; want orders alone, whole", r)
			}

			var logs lockedBuffer
			counts := map[string]int{}
			s := openCounting(t, dir, key, &logs, counts)
			if topics, err := s.Topics(ctx); err != nil || names(topics) != "orders" {
				t.Fatalf("Topics = %v, %v; want orders alone", names(topics), err)
			}
			if subs, err := s.Subscriptions(ctx, "orders"); err != nil || names(subs) != "billing,hook" {
				t.Errorf("Subscriptions of orders = %v, %v", names(subs), err)
			}
			if got := journalIDs(t, s, "orders"); got != "orders0,orders1,orders2" {
				t.Errorf("orders' journal = %s", got)
			}
			if st, err := s.LoadSubscription(ctx, "orders", "billing"); err != nil || st.Cursor != 2 {
				t.Errorf("orders/billing = %+v, %v; want its cursor at 2", st, err)
			}
			if _, err := s.Read(ctx, "broken", 1, 10); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Read of the damaged topic: %v; want store.ErrNotFound", err)
			}
			if counts[DamageDefinition] != want || len(counts) != 1 || s.Health().Corruptions != want {
				t.Errorf("damage counted %v, Health %+v; want %d definition damage", counts, s.Health(), want)
			}
			l := logs.String()
			if strings.Count(l, "level=ERROR") != want || !strings.Contains(l, "a topic's stored definition is damaged") ||
				!strings.Contains(l, "topic=broken") || !strings.Contains(l, "egrid topic delete --name broken") {
				t.Errorf("want %d ERRORs, one naming the topic and the delete; logs:\n%s", want, l)
			}

			for _, name := range []string{"broken", "BROKEN"} {
				err := s.PutTopic(ctx, name, nil)
				if !errors.Is(err, store.ErrDamaged) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "delete the topic") {
					t.Errorf("PutTopic(%s) = %v; want store.ErrDamaged saying to delete it", name, err)
				}
			}
			journal, _ := s.Keys(KindJournal)
			if err := s.DeleteTopic(ctx, "broken"); err != nil {
				t.Fatalf("DeleteTopic of the damaged topic: %v", err)
			}
			wantJournal, wantSubs, wantCursors := 3, 2, 2
			if !tc.idKnown {
				wantJournal, wantSubs, wantCursors = journal, 4, 4
			}
			for _, k := range []struct {
				kind byte
				want int
			}{{KindJournal, wantJournal}, {KindSubDef, wantSubs}, {KindCursor, wantCursors}} {
				if n, err := s.Keys(k.kind); err != nil || n != k.want {
					t.Errorf("after the delete, %d keys of kind %c (%v); want %d", n, k.kind, err, k.want)
				}
			}
			if err := s.PutTopic(ctx, "broken", nil); err != nil {
				t.Fatalf("PutTopic after the delete: %v", err)
			}
			if last, err := s.LastSeq(ctx, "broken"); err != nil || last != 0 {
				t.Errorf("the new topic's LastSeq = %d, %v; want an empty journal", last, err)
			}
			if subs, err := s.Subscriptions(ctx, "broken"); err != nil || len(subs) != 0 {
				t.Errorf("the new topic's subscriptions = %v, %v; want none", names(subs), err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if !tc.idKnown {
				return // its remains stay, reported as orphans
			}
			counts = map[string]int{}
			s = openCounting(t, dir, key, &logs, counts)
			if topics, err := s.Topics(ctx); err != nil || names(topics) != "broken,orders" || len(counts) != 0 {
				t.Errorf("after a restart: Topics = %v, %v, damage %v; want both and none", names(topics), err, counts)
			}
		})
	}
}

// A subscription definition whose value does not decode costs that subscription alone: its
// topic and the topic's other subscription are served, the damage reported once. PutSubscription
// refuses its name with store.ErrDamaged; DeleteSubscription removes it with its state, and the
// name can be created again, starting at the journal's end. Before, Open failed.
func TestDamagedSubscriptionDefinitionIsLeftOut(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	var hookKey []byte
	writeDefStore(t, dir, nil, func(k, v []byte) []byte {
		if k[0] == prefixSub && bytes.HasSuffix(k, []byte("hook")) && hookKey == nil {
			hookKey = bytes.Clone(k) // orders' (its id is lower)
			return append([]byte{0x7f}, v[1:]...)
		}
		return nil
	})
	r, err := Check(ctx, dir, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0].Error(), `subscription "hook" of topic "orders": its definition is damaged`) {
		t.Errorf("Check problems = %v; want one naming orders/hook", r.Problems)
	}

	var logs lockedBuffer
	counts := map[string]int{}
	s := openCounting(t, dir, nil, &logs, counts)
	if subs, err := s.Subscriptions(ctx, "orders"); err != nil || names(subs) != "billing" {
		t.Fatalf("Subscriptions of orders = %v, %v; want billing alone", names(subs), err)
	}
	if subs, err := s.Subscriptions(ctx, "broken"); err != nil || names(subs) != "billing,hook" {
		t.Errorf("Subscriptions of broken = %v, %v; want both", names(subs), err)
	}
	if got := journalIDs(t, s, "orders"); got != "orders0,orders1,orders2" {
		t.Errorf("orders' journal = %s", got)
	}
	if c, err := s.Cursors(ctx, "orders"); err != nil || len(c) != 1 || c["billing"] != 2 {
		t.Errorf("orders' cursors = %v, %v; want billing at 2 alone", c, err)
	}
	if counts[DamageDefinition] != 1 || len(counts) != 1 {
		t.Errorf("damage counted %v; want one definition damage", counts)
	}
	if l := logs.String(); strings.Count(l, "level=ERROR") != 1 || !strings.Contains(l, "topic=orders subscription=hook") ||
		!strings.Contains(l, "egrid event-subscription delete --topic orders --name hook") {
		t.Errorf("want one ERROR naming the subscription and the delete; logs:\n%s", l)
	}
	err = s.PutSubscription(ctx, "orders", "hook", nil)
	if !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), `subscription "hook" of topic "orders"`) {
		t.Errorf("PutSubscription of the damaged name = %v; want store.ErrDamaged naming it", err)
	}
	if err := s.DeleteSubscription(ctx, "orders", "hook"); err != nil {
		t.Fatalf("DeleteSubscription of the damaged subscription: %v", err)
	}
	// Its definition and, by the id the damaged value still gives, its cursor.
	if n, _ := s.Keys(KindSubDef); n != 3 {
		t.Errorf("%d subscription definitions after the delete; want 3", n)
	}
	if n, _ := s.Keys(KindCursor); n != 3 {
		t.Errorf("%d cursors after the delete; want 3", n)
	}
	if err := s.PutSubscription(ctx, "orders", "hook", nil); err != nil {
		t.Fatalf("PutSubscription after the delete: %v", err)
	}
	if c, err := s.Cursors(ctx, "orders"); err != nil || c["hook"] != 3 {
		t.Errorf("the new subscription's cursor = %v, %v; want the journal's end, 3", c, err)
	}
}

// A subscription stored under a topic id that no definition holds, and a subscription key too
// short to name a topic, are left out and reported (one count each, a problem of egrid store
// check each); the store opens and serves the rest. Before, Open failed.
func TestOrphanedAndMalformedSubscriptionKeysAreLeftOut(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	writeDefStore(t, dir, nil, func(k, v []byte) []byte { return nil })
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := s.gen.db.NewBatch()
	_ = b.Set(subDefKey(999, "lost"), appendDef(nil, 1000, nil), nil)
	_ = b.Set([]byte{prefixSub, 0, 1}, appendDef(nil, 1001, nil), nil)
	_ = b.Set(idKey(prefixCursor, 1000), encodeUint64(7), nil) // the orphan's state
	_ = b.Set(nextIDKey, encodeUint64(1001), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r, err := Check(ctx, dir, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 2 || !strings.Contains(fmt.Sprint(r.Problems), `subscription "lost" is stored under topic id 999`) ||
		!strings.Contains(fmt.Sprint(r.Problems), `key "S\x00\x01" is too short`) {
		t.Errorf("Check problems = %v; want the orphan and the malformed key", r.Problems)
	}
	var logs lockedBuffer
	counts := map[string]int{}
	s = openCounting(t, dir, nil, &logs, counts)
	if topics, err := s.Topics(ctx); err != nil || names(topics) != "broken,orders" {
		t.Errorf("Topics = %v, %v; want both", names(topics), err)
	}
	if counts[DamageDefinition] != 2 || len(counts) != 1 {
		t.Errorf("damage counted %v; want two definition damage", counts)
	}
	if l := logs.String(); strings.Count(l, "level=ERROR") != 2 || !strings.Contains(l, "topicID=999 subscription=lost") ||
		strings.Count(l, "this start removes it") != 2 {
		t.Errorf("want two ERRORs, one naming the orphan, each saying this start removes it; logs:\n%s", l)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The start that reported them removed them, with the orphan's state: the next one is clean.
	var logs2 lockedBuffer
	counts = map[string]int{}
	s = openCounting(t, dir, nil, &logs2, counts)
	if len(counts) != 0 || strings.Contains(logs2.String(), "level=ERROR") {
		t.Errorf("the next start counted %v; logs:\n%s", counts, logs2.String())
	}
	for _, k := range [][]byte{subDefKey(999, "lost"), {prefixSub, 0, 1}, idKey(prefixCursor, 1000)} {
		if _, ok, err := get(s.gen.db, k); ok || err != nil {
			t.Errorf("key %q is still stored (%v)", k, err)
		}
	}
}

// A damaged table block holding the definitions still refuses Open (the names it holds cannot
// be read, so the store cannot say which topics it would start without), but the error says
// so and what to do, wraps ErrCorrupt, is counted, and egrid store check lists it as damage
// rather than failing to read the store. So it does with a secret key, whose check runs
// first and reads the definitions to seal them: before, that read failed Open with pebble's
// bare error, uncounted.
func TestDamagedCatalogueBlockRefusesOpenSayingWhatToDo(t *testing.T) {
	k := bytes.Repeat([]byte{1}, 32)
	for _, tc := range []struct {
		name              string
		writeKey, openKey []byte
	}{
		{name: "no secret key"},
		{name: "a secret key given at this start", openKey: k},
		{name: "the secret key the store was written with", writeKey: k, openKey: k},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			s, err := Open(dir, Options{tune: noCompactions, SecretKey: tc.writeKey})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.gen.db.Flush(); err != nil { // the format and key check apart
				t.Fatal(err)
			}
			b := s.gen.db.NewBatch()
			for i := range 200 {
				name := fmt.Sprintf("topic-%03d-%s", i, strings.Repeat("x", 100))
				_ = b.Set(nameKey(prefixTopic, name), appendDef(nil, uint64(i+1), []byte(strings.Repeat("s", 200))), nil)
			}
			if err := b.Commit(pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if err := s.gen.db.Flush(); err != nil {
				t.Fatal(err)
			}
			var table string
			levels, err := s.gen.db.SSTables()
			if err != nil {
				t.Fatal(err)
			}
			for _, level := range levels {
				for _, f := range level {
					if f.Smallest.UserKey[0] == prefixTopic {
						table = filepath.Join(dir, fmt.Sprintf("%06d.sst", f.FileNum))
					}
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if table == "" {
				t.Fatalf("no table file holds the topic definitions alone: %v", levels)
			}
			damageAt(t, table, 8)

			counts := map[string]int{}
			_, err = Open(dir, Options{tune: noCompactions, SecretKey: tc.openKey, OnCorruption: func(kind string) { counts[kind]++ }})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "definitions are in a damaged table block") ||
				!strings.Contains(err.Error(), "Restore the directory from a backup") || !strings.Contains(err.Error(), "egrid store check") {
				t.Fatalf("Open = %v; want ErrCorrupt saying the definitions are damaged and what to do", err)
			}
			if counts[DamageTable] != 1 {
				t.Errorf("damage counted %v; want one table damage", counts)
			}
			r, err := Check(ctx, dir, tc.openKey, slog.New(slog.DiscardHandler))
			if err != nil || len(r.Problems) != 1 || !errors.Is(r.Problems[0], ErrCorrupt) {
				t.Errorf("Check = %+v, %v; want the damage as its one problem", r, err)
			}
		})
	}
}

// The secret key check (K) tells a wrong key from damage; damaged itself, it must not be taken
// for a wrong key, nor stop the store: when a sealed definition opens with the key given, the
// key is right, so the store opens, says so once (an ERROR, a count of kind table when pebble
// reports the block damaged, definition when it does not open; a problem of egrid store
// check), writes the key check again and the next start is clean. A key that opens no
// definition is still refused as one that does not fit, and no key as none. Before, a key
// check in a damaged block failed Open with pebble's bare error, and one that did not open
// refused the right key as the wrong one.
func TestDamagedKeyCheckIsToldFromAWrongKey(t *testing.T) {
	k := bytes.Repeat([]byte{1}, 32)
	for _, tc := range []struct {
		name string
		kind string
	}{
		{name: "in a damaged table block", kind: DamageTable},
		{name: "does not open", kind: DamageDefinition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			writeDefStore(t, dir, k, func(k, v []byte) []byte { return nil })
			s, err := Open(dir, Options{tune: noCompactions, SecretKey: k})
			if err != nil {
				t.Fatal(err)
			}
			if tc.kind == DamageTable {
				isolateAndDamageKeys(t, s, dir, keyCheckKey)
			} else {
				v, _, _ := get(s.gen.db, keyCheckKey)
				v = bytes.Clone(v)
				v[len(v)-1] ^= 0xff
				setRaw(t, s, keyCheckKey, v)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for _, wrong := range [][]byte{bytes.Repeat([]byte{2}, 32), nil} {
				if _, err := Open(dir, Options{tune: noCompactions, SecretKey: wrong}); !errors.Is(err, ErrSecretKey) {
					t.Errorf("Open with key %x = %v; want ErrSecretKey", wrong, err)
				}
			}
			r, err := Check(ctx, dir, k, slog.New(slog.DiscardHandler))
			if err != nil || len(r.Problems) != 1 || !strings.Contains(r.Problems[0].Error(), "the secret key check") || r.Topics != 2 {
				t.Errorf("Check = %+v, %v; want the key check as its one problem, both topics", r, err)
			}

			var logs lockedBuffer
			counts := map[string]int{}
			s, err = Open(dir, Options{tune: noCompactions, SecretKey: k, Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnCorruption: func(kind string) { counts[kind]++ }})
			if err != nil {
				t.Fatalf("Open with the right key: %v", err)
			}
			if topics, err := s.Topics(ctx); err != nil || names(topics) != "broken,orders" {
				t.Errorf("Topics = %v, %v; want both", names(topics), err)
			}
			if counts[tc.kind] != 1 || len(counts) != 1 {
				t.Errorf("damage counted %v; want one of kind %s", counts, tc.kind)
			}
			if l := logs.String(); strings.Count(l, "level=ERROR") != 1 || !strings.Contains(l, "the secret key check") {
				t.Errorf("want one ERROR on the key check; logs:\n%s", l)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			var logs2 lockedBuffer
			counts = map[string]int{}
			s, err = Open(dir, Options{tune: noCompactions, SecretKey: k, Logger: slog.New(slog.NewTextHandler(&logs2, nil)), OnCorruption: func(kind string) { counts[kind]++ }})
			if err != nil {
				t.Fatalf("the next start: %v", err)
			}
			defer s.Close()
			if len(counts) != 0 || strings.Contains(logs2.String(), "level=ERROR") {
				t.Errorf("the next start counted %v; logs:\n%s", counts, logs2.String())
			}
		})
	}
}
