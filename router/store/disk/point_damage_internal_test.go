package disk

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
)

// A delivery history or a dead letter in a damaged table block fails its point read with an
// error that wraps ErrCorrupt (and so store.ErrCorrupt, which the router reads), saying what is
// lost and what to do, so that the router and the CLI tell damage from a store that is down;
// each block is logged and counted once (kind table), however often it is read. Before,
// History and DeadLettersByID returned pebble's bare error, uncounted.
func TestDamagedPointReadsSayDamage(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	writeValStore(t, dir, 10, 0, func(s *Store) {
		if err := s.PutHistory(ctx, "orders", "billing", 0, []store.HistoryRecord{{EventID: "e1", Expires: time.Now().Add(time.Hour), Payload: []byte("h")}}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "d1", Payload: []byte("{}")}}); err != nil {
			t.Fatal(err)
		}
		isolateAndDamage(t, s, dir, historyKey(s.topics["orders"].subs["billing"].id, "e1"))
		isolateAndDamage(t, s, dir, nameKey(prefixDeadLetter, "d1"))
	})
	v := openVal(t, dir)
	for range 2 {
		_, err := v.History(ctx, "orders", "billing", "e1", time.Now())
		if !errors.Is(err, ErrCorrupt) || !errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrNotFound) ||
			!strings.Contains(err.Error(), `the delivery history of event "e1" of subscription "billing" of topic "orders" is in a damaged table block`) ||
			!strings.Contains(err.Error(), "egrid explain finds none") || !strings.Contains(err.Error(), "Restore the directory from a backup") {
			t.Errorf("History = %v; want ErrCorrupt (and store.ErrCorrupt, which the router reads) saying what is lost and what to do", err)
		}
		_, err = v.DeadLettersByID(ctx, []string{"d1"})
		if !errors.Is(err, ErrCorrupt) || !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), `dead letter "d1" of the dead-letter outbox is in a damaged table block`) ||
			!strings.Contains(err.Error(), "not yet written to the dead-letter destination") || !strings.Contains(err.Error(), "Restore the directory from a backup") {
			t.Errorf("DeadLettersByID = %v; want ErrCorrupt saying what is lost and what to do", err)
		}
	}
	// The scans that go past the blocks report them no more: one block, one count.
	if err := v.ExpireHistory(ctx, time.Now()); err != nil {
		t.Errorf("ExpireHistory: %v; want it past the damaged block", err)
	}
	if recs, err := v.DeadLetters(ctx); err != nil || len(recs) != 0 {
		t.Errorf("DeadLetters = %v, %v; want none, the one dead letter lost", recs, err)
	}
	if c := v.damage(); c[DamageTable] != 2 || len(c) != 1 || v.Health().Corruptions != 2 {
		t.Errorf("damage counted %v; want each of the 2 blocks once, kind table", c)
	}
	l := v.logs.String()
	if strings.Count(l, "level=ERROR") != 2 || strings.Count(l, `level=ERROR msg="disk store: delivery histories are in a damaged table block`) != 1 ||
		strings.Count(l, `level=ERROR msg="disk store: dead letters of the outbox are in a damaged table block`) != 1 || !strings.Contains(l, "egrid store check") {
		t.Errorf("want one ERROR for each block, saying what to do; logs:\n%s", l)
	}
	// The history's ERROR carries the keys every line about an event carries (it had eventID).
	if !strings.Contains(l, "topic=orders subscription=billing eventId=e1 ") {
		t.Errorf("want the damaged history's ERROR to carry topic, subscription and eventId; logs:\n%s", l)
	}
}

// A definition in a table block damaged while the store runs (Open has read the definitions)
// fails the reads of it, the listings and a swap, with an error that wraps ErrCorrupt and says
// what to do, the block counted once. Before, they returned pebble's bare error.
func TestDefinitionDamagedAfterOpenSaysDamage(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	writeValStore(t, dir, 10, 0, func(*Store) {})
	v := openVal(t, dir)
	isolateAndDamage(t, v.Store, dir, subDefKey(v.topics["orders"].id, "billing"))
	for range 2 {
		_, err := v.Subscriptions(ctx, "orders")
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "definitions are in a damaged table block") || !strings.Contains(err.Error(), "Restore the directory from a backup") {
			t.Errorf("Subscriptions = %v; want ErrCorrupt saying what to do", err)
		}
		err = v.SwapSubscription(ctx, "orders", "billing", nil, []byte("{}"))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "definitions are in a damaged table block") {
			t.Errorf("SwapSubscription = %v; want ErrCorrupt saying what to do", err)
		}
	}
	if c := v.damage(); c[DamageTable] != 1 || len(c) != 1 {
		t.Errorf("damage counted %v; want the block once, kind table", c)
	}
	if l := v.logs.String(); strings.Count(l, "level=ERROR") != 1 || !strings.Contains(l, "definitions are in a damaged table block") {
		t.Errorf("want one ERROR about the block; logs:\n%s", l)
	}
}
