package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// t0 is the publish time of the suite's first events: a non-UTC zone and nanoseconds, so a
// store that drops either fails the round trip.
var t0 = time.Date(2026, 11, 22, 10, 30, 15, 123456789, time.FixedZone("UTC+1", 3600))

// event returns a distinct event with every field set; prefix and i make it unique.
func event(prefix string, i int) *schemas.Event {
	id := fmt.Sprintf("%s-%d", prefix, i)
	ev := &schemas.Event{
		ID:          id,
		Type:        "Contoso.Items.ItemReceived",
		Subject:     "/items/" + id + "/ünïcødé",
		Time:        "2026-11-22T10:30:15.1234567Z",
		DataVersion: "1.0",
		Source:      "/subscriptions/s/resourceGroups/g/providers/Microsoft.EventGrid/topics/" + prefix,
		SpecVersion: "1.0",
		Traceparent: fmt.Sprintf("00-%032x-%016x-01", i+1, i+7),
	}
	// Every third event has the optional fields empty, as an Event Grid schema event does.
	if i%3 == 2 {
		ev.SpecVersion, ev.Traceparent = "", ""
	}
	ev.Raw = fmt.Appendf(nil, `{"id":%q,"eventType":%q,"subject":%q,"data":{"n":%d,"pad":%q}}`,
		ev.ID, ev.Type, ev.Subject, i, strings.Repeat("x", i%97))
	return ev
}

// events returns n events numbered from first.
func events(prefix string, first, n int) []*schemas.Event {
	evs := make([]*schemas.Event, n)
	for i := range evs {
		evs[i] = event(prefix, first+i)
	}
	return evs
}

// entries returns the journal entries events make when appended at publishTime as
// sequence numbers first, first+1, ….
func entries(first uint64, publishTime time.Time, evs []*schemas.Event) []store.Entry {
	out := make([]store.Entry, len(evs))
	for i, ev := range evs {
		out[i] = store.Entry{Seq: first + uint64(i), PublishTime: publishTime, Event: ev}
	}
	return out
}

var outcomes = []schemas.Outcome{schemas.TimedOut, schemas.Busy, schemas.GenericError, schemas.NotFound}

// parked returns a parked event for seq with every field set from attempts. With attempts 0
// it is an event never attempted (delayed delivery): zero times, outcome and status.
func parked(seq uint64, attempts int) store.Parked {
	base := time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.FixedZone("UTC-7", -7*3600))
	p := store.Parked{
		Seq:         seq,
		PublishTime: base.Add(time.Duration(seq) * time.Millisecond),
		Event:       event("parked", int(seq)),
		Attempts:    attempts,
		NextDue:     base.Add(time.Hour + time.Duration(attempts)*time.Minute),
	}
	if attempts > 0 {
		p.FirstAttempt = base.Add(time.Second)
		p.LastAttempt = base.Add(time.Duration(attempts) * time.Minute)
		p.LastOutcome = outcomes[attempts%len(outcomes)]
		p.LastStatus = 500 + attempts
	}
	return p
}

func putTopic(t *testing.T, s store.Store, name string) {
	t.Helper()
	if err := s.PutTopic(t.Context(), name, []byte(`{"name":"`+name+`"}`)); err != nil {
		t.Fatalf("PutTopic(%q): %v", name, err)
	}
}

func putSub(t *testing.T, s store.Store, topic, name string) {
	t.Helper()
	if err := s.PutSubscription(t.Context(), topic, name, []byte(`{"sub":"`+name+`"}`)); err != nil {
		t.Fatalf("PutSubscription(%q, %q): %v", topic, name, err)
	}
}

func appendOK(t *testing.T, s store.Store, topic string, publishTime time.Time, evs []*schemas.Event) uint64 {
	t.Helper()
	last, err := s.Append(t.Context(), topic, publishTime, evs)
	if err != nil {
		t.Fatalf("Append(%q, %d events): %v", topic, len(evs), err)
	}
	return last
}

func lastSeq(t *testing.T, s store.Store, topic string) uint64 {
	t.Helper()
	last, err := s.LastSeq(t.Context(), topic)
	if err != nil {
		t.Fatalf("LastSeq(%q): %v", topic, err)
	}
	return last
}

func read(t *testing.T, s store.Store, topic string, from uint64, max int) []store.Entry {
	t.Helper()
	got, err := s.Read(t.Context(), topic, from, max)
	if err != nil {
		t.Fatalf("Read(%q, %d, %d): %v", topic, from, max, err)
	}
	return got
}

func update(t *testing.T, s store.Store, topic, sub string, u store.Update) {
	t.Helper()
	if err := s.UpdateSubscription(t.Context(), topic, sub, u); err != nil {
		t.Fatalf("UpdateSubscription(%q, %q): %v", topic, sub, err)
	}
}

func load(t *testing.T, s store.Store, topic, sub string) store.SubscriptionState {
	t.Helper()
	st, err := s.LoadSubscription(t.Context(), topic, sub)
	if err != nil {
		t.Fatalf("LoadSubscription(%q, %q): %v", topic, sub, err)
	}
	return st
}

func seqsOf[T any](items []T, seq func(T) uint64) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = fmt.Sprint(seq(it))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func entrySeq(e store.Entry) uint64   { return e.Seq }
func parkedSeq(p store.Parked) uint64 { return p.Seq }

// checkEntries reports every difference between got and want: Seq, PublishTime (by Equal)
// and the Event (deep-equal).
func checkEntries(t *testing.T, what string, got, want []store.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got entries %s, want %s", what, seqsOf(got, entrySeq), seqsOf(want, entrySeq))
		return
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Seq != w.Seq {
			t.Errorf("%s: entry %d has Seq %d, want %d", what, i, g.Seq, w.Seq)
		}
		if !g.PublishTime.Equal(w.PublishTime) {
			t.Errorf("%s: entry %d PublishTime = %v, want %v", what, w.Seq, g.PublishTime, w.PublishTime)
		}
		if !reflect.DeepEqual(g.Event, w.Event) {
			t.Errorf("%s: entry %d Event = %+v, want %+v", what, w.Seq, g.Event, w.Event)
		}
	}
}

// checkState reports every difference between two subscription states, comparing each
// parked field (times by Equal, the Event deep-equal).
func checkState(t *testing.T, what string, got, want store.SubscriptionState) {
	t.Helper()
	if got.Cursor != want.Cursor {
		t.Errorf("%s: Cursor = %d, want %d", what, got.Cursor, want.Cursor)
	}
	if !bytes.Equal(got.Probation, want.Probation) || (got.Probation == nil) != (want.Probation == nil) {
		t.Errorf("%s: Probation = %q, want %q", what, got.Probation, want.Probation)
	}
	if len(got.Parked) != len(want.Parked) {
		t.Errorf("%s: parked %s, want %s", what, seqsOf(got.Parked, parkedSeq), seqsOf(want.Parked, parkedSeq))
		return
	}
	for i := range want.Parked {
		g, w := got.Parked[i], want.Parked[i]
		if g.Seq != w.Seq {
			t.Errorf("%s: parked[%d].Seq = %d, want %d", what, i, g.Seq, w.Seq)
			continue
		}
		times := []struct {
			field     string
			got, want time.Time
		}{
			{"PublishTime", g.PublishTime, w.PublishTime},
			{"FirstAttempt", g.FirstAttempt, w.FirstAttempt},
			{"LastAttempt", g.LastAttempt, w.LastAttempt},
			{"NextDue", g.NextDue, w.NextDue},
		}
		for _, tm := range times {
			if !tm.got.Equal(tm.want) {
				t.Errorf("%s: parked %d %s = %v, want %v", what, w.Seq, tm.field, tm.got, tm.want)
			}
		}
		if g.Attempts != w.Attempts || g.LastOutcome != w.LastOutcome || g.LastStatus != w.LastStatus {
			t.Errorf("%s: parked %d Attempts, LastOutcome, LastStatus = %d, %v, %d, want %d, %v, %d",
				what, w.Seq, g.Attempts, g.LastOutcome, g.LastStatus, w.Attempts, w.LastOutcome, w.LastStatus)
		}
		if !reflect.DeepEqual(g.Event, w.Event) {
			t.Errorf("%s: parked %d Event = %+v, want %+v", what, w.Seq, g.Event, w.Event)
		}
	}
}

// checkDefs reports a difference between two definition lists (names and specs, in order).
func checkDefs(t *testing.T, what string, got, want []store.Definition) {
	t.Helper()
	format := func(defs []store.Definition) string {
		parts := make([]string, len(defs))
		for i, d := range defs {
			parts[i] = fmt.Sprintf("%s=%s", d.Name, d.Spec)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	if g, w := format(got), format(want); g != w {
		t.Errorf("%s: got %s, want %s", what, g, w)
	}
}

func cursors(t *testing.T, s store.Store, topic string) map[string]uint64 {
	t.Helper()
	c, err := s.Cursors(t.Context(), topic)
	if err != nil {
		t.Fatalf("Cursors(%q): %v", topic, err)
	}
	return c
}

// checkCursors reports a difference between two cursor maps. A nil map is a failure: the
// contract promises an empty map for a topic without subscriptions.
func checkCursors(t *testing.T, what string, got, want map[string]uint64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: Cursors returned a nil map, want %v", what, want)
		return
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s: Cursors = %v, want %v", what, got, want)
	}
}

// checkNotFound reports err unless it matches store.ErrNotFound.
func checkNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: err = %v, want one matching store.ErrNotFound", what, err)
	}
}

// snapshot is everything a store holds, read through its API.
type snapshot struct {
	topics  []store.Definition
	subs    map[string][]store.Definition      // by topic
	last    map[string]uint64                  // by topic
	journal map[string][]store.Entry           // by topic
	states  map[string]store.SubscriptionState // by "topic/sub"
	cursors map[string]map[string]uint64       // by topic
}

func takeSnapshot(ctx context.Context, t *testing.T, s store.Store) snapshot {
	t.Helper()
	snap := snapshot{
		subs:    map[string][]store.Definition{},
		last:    map[string]uint64{},
		journal: map[string][]store.Entry{},
		states:  map[string]store.SubscriptionState{},
		cursors: map[string]map[string]uint64{},
	}
	var err error
	if snap.topics, err = s.Topics(ctx); err != nil {
		t.Fatalf("Topics: %v", err)
	}
	for _, topic := range snap.topics {
		name := topic.Name
		subs, err := s.Subscriptions(ctx, name)
		if err != nil {
			t.Fatalf("Subscriptions(%q): %v", name, err)
		}
		snap.subs[name] = subs
		snap.last[name] = lastSeq(t, s, name)
		snap.journal[name] = read(t, s, name, 0, 1<<20)
		snap.cursors[name] = cursors(t, s, name)
		for _, sub := range subs {
			snap.states[name+"/"+sub.Name] = load(t, s, name, sub.Name)
		}
	}
	return snap
}

func checkSnapshot(t *testing.T, got, want snapshot) {
	t.Helper()
	checkDefs(t, "Topics", got.topics, want.topics)
	for _, topic := range want.topics {
		name := topic.Name
		checkDefs(t, "Subscriptions("+name+")", got.subs[name], want.subs[name])
		if got.last[name] != want.last[name] {
			t.Errorf("LastSeq(%q) = %d, want %d", name, got.last[name], want.last[name])
		}
		checkEntries(t, "journal of "+name, got.journal[name], want.journal[name])
		checkCursors(t, "Cursors("+name+")", got.cursors[name], want.cursors[name])
	}
	for key, st := range want.states {
		checkState(t, "state of "+key, got.states[key], st)
		if got.states[key].Epoch != st.Epoch {
			t.Errorf("epoch of %s = %d, want %d", key, got.states[key].Epoch, st.Epoch)
		}
	}
}

// def returns a definition; an empty spec is nil.
func def(name, spec string) store.Definition {
	if spec == "" {
		return store.Definition{Name: name}
	}
	return store.Definition{Name: name, Spec: []byte(spec)}
}
