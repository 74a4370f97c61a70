package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// Run runs the conformance suite on the stores open returns. open must return a new, empty
// store each time; it is called once per subtest, from parallel subtests, and the suite closes
// every store it gets (so Close must be idempotent, as the contract says).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s store.Store)
	}{
		{"AppendNumbersPerTopic", testAppendNumbering},
		{"AppendNoEvents", testAppendNoEvents},
		{"ReadRanges", testReadRanges},
		{"Trim", testTrim},
		{"TopicDefinitions", testTopicDefinitions},
		{"PutTopicKeepsState", testPutTopicKeepsState},
		{"SubscriptionDefinitions", testSubscriptionDefinitions},
		{"PutSubscriptionKeepsState", testPutSubscriptionKeepsState},
		{"SwapSubscription", testSwapSubscription},
		{"Creates", testCreates},
		{"NewSubscriptionCursor", testNewSubscriptionCursor},
		{"RecreatedSubscriptionStartsFresh", testRecreatedSubscription},
		{"SubscriptionEpochs", testSubscriptionEpochs},
		{"UpdateSubscription", testUpdateSubscription},
		{"ProbationState", testProbationState},
		{"DeadLetterOutbox", testDeadLetterOutbox},
		{"DeadLetterReads", testDeadLetterReads},
		{"UpdateHandsDeadLettersOver", testUpdateHandsDeadLettersOver},
		{"History", testHistory},
		{"ExpireManyHistories", testExpireManyHistories},
		{"Cursors", testCursors},
		{"SubscriptionStateIsolated", testSubscriptionIsolation},
		{"DeleteTopic", testDeleteTopic},
		{"CreateRacingTopicDelete", testCreateRacingTopicDelete},
		{"NotFound", testNotFound},
		{"ConcurrentAppends", testConcurrentAppends},
		{"ConcurrentMixed", testConcurrentMixed},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.run(t, s)
		})
	}
}

func testAppendNumbering(t *testing.T, s store.Store) {
	putTopic(t, s, "orders")
	putTopic(t, s, "audit")
	t1 := t0.Add(1500 * time.Millisecond)
	o1, o2, a1 := events("orders", 0, 3), events("orders", 3, 2), events("audit", 0, 1)

	if got := lastSeq(t, s, "orders"); got != 0 {
		t.Errorf("LastSeq of an empty journal = %d, want 0", got)
	}
	if got := appendOK(t, s, "orders", t0, o1); got != 3 {
		t.Errorf("first Append of 3 events returned %d, want 3", got)
	}
	if got := appendOK(t, s, "orders", t1, o2); got != 5 {
		t.Errorf("second Append of 2 events returned %d, want 5", got)
	}
	if got := appendOK(t, s, "audit", t1, a1); got != 1 {
		t.Errorf("Append to another topic returned %d, want 1: numbering is per topic", got)
	}
	if got := lastSeq(t, s, "orders"); got != 5 {
		t.Errorf("LastSeq(orders) = %d, want 5", got)
	}
	if got := lastSeq(t, s, "audit"); got != 1 {
		t.Errorf("LastSeq(audit) = %d, want 1", got)
	}
	want := append(entries(1, t0, o1), entries(4, t1, o2)...)
	checkEntries(t, "Read(orders, 1, 100)", read(t, s, "orders", 1, 100), want)
	checkEntries(t, "Read(audit, 1, 100)", read(t, s, "audit", 1, 100), entries(1, t1, a1))
}

// Append with no events appends nothing and returns LastSeq (suite-defined, see doc.go).
func testAppendNoEvents(t *testing.T, s store.Store) {
	putTopic(t, s, "t")
	if got := appendOK(t, s, "t", t0, nil); got != 0 {
		t.Errorf("Append(nil) on an empty journal returned %d, want 0", got)
	}
	evs := events("t", 0, 2)
	appendOK(t, s, "t", t0, evs)
	if got := appendOK(t, s, "t", t0, []*schemas.Event{}); got != 2 {
		t.Errorf("Append(empty) after 2 events returned %d, want 2", got)
	}
	checkEntries(t, "journal", read(t, s, "t", 1, 100), entries(1, t0, evs))
}

func testReadRanges(t *testing.T, s store.Store) {
	putTopic(t, s, "t")
	evs := events("t", 0, 10)
	appendOK(t, s, "t", t0, evs)
	all := entries(1, t0, evs)
	tests := []struct {
		name  string
		from  uint64
		max   int
		first uint64 // Seq of the first entry expected
		n     int    // number of entries expected
	}{
		{name: "from 0 reads from the first", from: 0, max: 100, first: 1, n: 10},
		{name: "whole journal", from: 1, max: 10, first: 1, n: 10},
		{name: "max limits", from: 1, max: 3, first: 1, n: 3},
		{name: "middle", from: 4, max: 3, first: 4, n: 3},
		{name: "max beyond the end", from: 9, max: 5, first: 9, n: 2},
		{name: "last entry", from: 10, max: 1, first: 10, n: 1},
		{name: "from just beyond the end", from: 11, max: 5},
		{name: "from far beyond the end", from: 1 << 40, max: 5},
		{name: "max 0", from: 1, max: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want []store.Entry
			if tc.n > 0 {
				want = all[tc.first-1 : int(tc.first-1)+tc.n]
			}
			checkEntries(t, fmt.Sprintf("Read(from %d, max %d)", tc.from, tc.max), read(t, s, "t", tc.from, tc.max), want)
		})
	}
}

// Trim deletes entries <= through and never changes LastSeq or the numbering.
func testTrim(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "t")
	evs := events("t", 0, 10)
	appendOK(t, s, "t", t0, evs)
	all := entries(1, t0, evs)
	steps := []struct {
		name    string
		through uint64
		want    []store.Entry // Read(0, 100) afterwards
	}{
		{name: "trim 0 is a no-op", through: 0, want: all},
		{name: "trim a prefix", through: 4, want: all[4:]},
		{name: "trim the same again", through: 4, want: all[4:]},
		{name: "trim lower than before", through: 2, want: all[4:]},
		{name: "trim further", through: 7, want: all[7:]},
		{name: "trim beyond the end", through: 100, want: nil},
	}
	for _, step := range steps {
		if err := s.Trim(ctx, "t", step.through); err != nil {
			t.Fatalf("%s: Trim(%d): %v", step.name, step.through, err)
		}
		checkEntries(t, step.name, read(t, s, "t", 0, 100), step.want)
		if got := lastSeq(t, s, "t"); got != 10 {
			t.Errorf("%s: LastSeq = %d, want 10 (Trim must not change it)", step.name, got)
		}
	}
	// Appending after everything was trimmed continues the numbering, and a Trim beyond the
	// end did not reach the entries appended after it. Read from a trimmed Seq starts at the
	// first entry left.
	more := events("t", 10, 2)
	if got := appendOK(t, s, "t", t0, more); got != 12 {
		t.Errorf("Append of 2 after trimming everything returned %d, want 12", got)
	}
	checkEntries(t, "Read(3, 100) after trimming", read(t, s, "t", 3, 100), entries(11, t0, more))
}

func testTopicDefinitions(t *testing.T, s store.Store) {
	ctx := t.Context()
	topics, err := s.Topics(ctx)
	if err != nil {
		t.Fatalf("Topics on an empty store: %v", err)
	}
	checkDefs(t, "Topics of an empty store", topics, nil)

	spec := []byte("spec-b")
	for _, d := range []store.Definition{{Name: "b", Spec: spec}, def("a", "spec-a"), def("c", "spec-c")} {
		if err := s.PutTopic(ctx, d.Name, d.Spec); err != nil {
			t.Fatalf("PutTopic(%q): %v", d.Name, err)
		}
	}
	spec[0] = 'X' // the store must have copied it
	steps := []struct {
		name string
		do   func() error
		want []store.Definition
	}{
		{
			name: "listed by name",
			do:   func() error { return nil },
			want: []store.Definition{def("a", "spec-a"), def("b", "spec-b"), def("c", "spec-c")},
		},
		{
			name: "put replaces the spec",
			do:   func() error { return s.PutTopic(ctx, "b", []byte("spec-b2")) },
			want: []store.Definition{def("a", "spec-a"), def("b", "spec-b2"), def("c", "spec-c")},
		},
		{
			name: "delete removes",
			do:   func() error { return s.DeleteTopic(ctx, "b") },
			want: []store.Definition{def("a", "spec-a"), def("c", "spec-c")},
		},
		{
			name: "empty spec",
			do:   func() error { return s.PutTopic(ctx, "aa", nil) },
			want: []store.Definition{def("a", "spec-a"), def("aa", ""), def("c", "spec-c")},
		},
	}
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got, err := s.Topics(ctx)
		if err != nil {
			t.Fatalf("%s: Topics: %v", step.name, err)
		}
		checkDefs(t, step.name, got, step.want)
	}
	checkNotFound(t, "DeleteTopic of a deleted topic", s.DeleteTopic(ctx, "b"))
}

// PutTopic on an existing topic replaces only its spec.
func testPutTopicKeepsState(t *testing.T, s store.Store) {
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	evs := events("t", 0, 3)
	appendOK(t, s, "t", t0, evs)
	update(t, s, "t", "sub", store.Update{Cursor: 2, Put: []store.Parked{parked(1, 1)}})

	if err := s.PutTopic(t.Context(), "t", []byte("new spec")); err != nil {
		t.Fatalf("PutTopic on an existing topic: %v", err)
	}
	if got := lastSeq(t, s, "t"); got != 3 {
		t.Errorf("LastSeq = %d after PutTopic replaced the spec, want 3", got)
	}
	checkEntries(t, "journal", read(t, s, "t", 0, 100), entries(1, t0, evs))
	subs, err := s.Subscriptions(t.Context(), "t")
	if err != nil {
		t.Fatalf("Subscriptions: %v", err)
	}
	checkDefs(t, "Subscriptions", subs, []store.Definition{def("sub", `{"sub":"sub"}`)})
	checkState(t, "subscription state", load(t, s, "t", "sub"),
		store.SubscriptionState{Cursor: 2, Parked: []store.Parked{parked(1, 1)}})
}

func testSubscriptionDefinitions(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "x")
	putTopic(t, s, "y")
	putTopic(t, s, "empty")
	spec := []byte("x-s2")
	for _, d := range []store.Definition{{Name: "s2", Spec: spec}, def("s1", "x-s1"), def("s3", "x-s3")} {
		if err := s.PutSubscription(ctx, "x", d.Name, d.Spec); err != nil {
			t.Fatalf("PutSubscription(x, %q): %v", d.Name, err)
		}
	}
	spec[0] = 'X' // the store must have copied it
	if err := s.PutSubscription(ctx, "y", "s1", []byte("y-s1")); err != nil {
		t.Fatalf("PutSubscription(y, s1): %v", err)
	}
	steps := []struct {
		name  string
		do    func() error
		wantX []store.Definition
	}{
		{
			name:  "listed by name",
			do:    func() error { return nil },
			wantX: []store.Definition{def("s1", "x-s1"), def("s2", "x-s2"), def("s3", "x-s3")},
		},
		{
			name:  "put replaces the spec",
			do:    func() error { return s.PutSubscription(ctx, "x", "s2", []byte("x-s2b")) },
			wantX: []store.Definition{def("s1", "x-s1"), def("s2", "x-s2b"), def("s3", "x-s3")},
		},
		{
			name:  "delete removes",
			do:    func() error { return s.DeleteSubscription(ctx, "x", "s1") },
			wantX: []store.Definition{def("s2", "x-s2b"), def("s3", "x-s3")},
		},
	}
	for _, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		for _, c := range []struct {
			topic string
			want  []store.Definition
		}{
			{"x", step.wantX},
			{"y", []store.Definition{def("s1", "y-s1")}},
			{"empty", nil},
		} {
			got, err := s.Subscriptions(ctx, c.topic)
			if err != nil {
				t.Fatalf("%s: Subscriptions(%q): %v", step.name, c.topic, err)
			}
			checkDefs(t, step.name+": Subscriptions("+c.topic+")", got, c.want)
		}
	}
	checkNotFound(t, "DeleteSubscription of a deleted subscription", s.DeleteSubscription(ctx, "x", "s1"))
	checkNotFound(t, "LoadSubscription of a deleted subscription", func() error {
		_, err := s.LoadSubscription(ctx, "x", "s1")
		return err
	}())
}

// PutSubscription on an existing subscription replaces only its spec.
func testPutSubscriptionKeepsState(t *testing.T, s store.Store) {
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	appendOK(t, s, "t", t0, events("t", 0, 4))
	want := store.SubscriptionState{Cursor: 3, Parked: []store.Parked{parked(2, 1)}}
	update(t, s, "t", "sub", store.Update{Cursor: 3, Put: want.Parked})
	appendOK(t, s, "t", t0, events("t", 4, 2))

	if err := s.PutSubscription(t.Context(), "t", "sub", []byte("new spec")); err != nil {
		t.Fatalf("PutSubscription on an existing subscription: %v", err)
	}
	checkState(t, "state after replacing the spec", load(t, s, "t", "sub"), want)
	subs, err := s.Subscriptions(t.Context(), "t")
	if err != nil {
		t.Fatalf("Subscriptions: %v", err)
	}
	checkDefs(t, "Subscriptions", subs, []store.Definition{def("sub", "new spec")})
}

// A new subscription's cursor starts at the topic's LastSeq (store.go, PutSubscription).
func testNewSubscriptionCursor(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "t")
	putSub(t, s, "t", "first")
	appendOK(t, s, "t", t0, events("t", 0, 5))
	putSub(t, s, "t", "second")
	appendOK(t, s, "t", t0, events("t", 5, 3))
	putSub(t, s, "t", "third")
	if err := s.Trim(ctx, "t", 8); err != nil {
		t.Fatalf("Trim: %v", err)
	}
	putSub(t, s, "t", "after-trim")

	for _, c := range []struct {
		sub  string
		want uint64
	}{
		{"first", 0},
		{"second", 5},
		{"third", 8},
		{"after-trim", 8},
	} {
		checkState(t, "new subscription "+c.sub, load(t, s, "t", c.sub), store.SubscriptionState{Cursor: c.want})
	}
}

// A subscription deleted and created again starts like a new one.
func testRecreatedSubscription(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	appendOK(t, s, "t", t0, events("t", 0, 3))
	update(t, s, "t", "sub", store.Update{Cursor: 3, Put: []store.Parked{parked(1, 2), parked(3, 1)}})
	if err := s.DeleteSubscription(ctx, "t", "sub"); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	appendOK(t, s, "t", t0, events("t", 3, 2))
	putSub(t, s, "t", "sub")
	checkState(t, "recreated subscription", load(t, s, "t", "sub"), store.SubscriptionState{Cursor: 5})
}

func testUpdateSubscription(t *testing.T, s store.Store) {
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	steps := []struct {
		name string
		u    store.Update
		want store.SubscriptionState
	}{
		{
			name: "put out of order, loaded by seq",
			u:    store.Update{Cursor: 7, Put: []store.Parked{parked(7, 1), parked(3, 2), parked(5, 0)}},
			want: store.SubscriptionState{Cursor: 7, Parked: []store.Parked{parked(3, 2), parked(5, 0), parked(7, 1)}},
		},
		{
			name: "cursor 0 leaves the cursor",
			u:    store.Update{Put: []store.Parked{parked(9, 3)}},
			want: store.SubscriptionState{Cursor: 7, Parked: []store.Parked{parked(3, 2), parked(5, 0), parked(7, 1), parked(9, 3)}},
		},
		{
			name: "lower cursor is ignored",
			u:    store.Update{Cursor: 4},
			want: store.SubscriptionState{Cursor: 7, Parked: []store.Parked{parked(3, 2), parked(5, 0), parked(7, 1), parked(9, 3)}},
		},
		{
			name: "delete, unknown seq ignored",
			u:    store.Update{Delete: []uint64{5, 99}},
			want: store.SubscriptionState{Cursor: 7, Parked: []store.Parked{parked(3, 2), parked(7, 1), parked(9, 3)}},
		},
		{
			name: "put replaces by seq",
			u:    store.Update{Put: []store.Parked{parked(3, 5)}},
			want: store.SubscriptionState{Cursor: 7, Parked: []store.Parked{parked(3, 5), parked(7, 1), parked(9, 3)}},
		},
		{
			name: "cursor, delete and put together",
			u:    store.Update{Cursor: 12, Delete: []uint64{7}, Put: []store.Parked{parked(11, 1)}},
			want: store.SubscriptionState{Cursor: 12, Parked: []store.Parked{parked(3, 5), parked(9, 3), parked(11, 1)}},
		},
		{
			name: "delete is applied before put",
			u:    store.Update{Delete: []uint64{9}, Put: []store.Parked{parked(9, 4)}},
			want: store.SubscriptionState{Cursor: 12, Parked: []store.Parked{parked(3, 5), parked(9, 4), parked(11, 1)}},
		},
		{
			name: "delete everything",
			u:    store.Update{Delete: []uint64{3, 9, 11}},
			want: store.SubscriptionState{Cursor: 12},
		},
		{
			name: "empty update",
			u:    store.Update{},
			want: store.SubscriptionState{Cursor: 12},
		},
		{
			name: "a synced update applies like any other",
			u:    store.Update{Sync: true, Cursor: 14, Put: []store.Parked{parked(13, 2)}},
			want: store.SubscriptionState{Cursor: 14, Parked: []store.Parked{parked(13, 2)}},
		},
		{
			name: "an empty synced update",
			u:    store.Update{Sync: true},
			want: store.SubscriptionState{Cursor: 14, Parked: []store.Parked{parked(13, 2)}},
		},
	}
	for _, step := range steps {
		update(t, s, "t", "sub", step.u)
		checkState(t, step.name, load(t, s, "t", "sub"), step.want)
		checkIndexAndBodies(t, s, step.name, step.want)
	}
}

// checkIndexAndBodies checks that LoadSubscriptionIndex returns want without events, and that
// ParkedEvents returns the parked events with their events, ordered by Seq, whatever the
// order and duplicates of the seqs asked for, leaving out seqs that are not parked.
func checkIndexAndBodies(t *testing.T, s store.Store, what string, want store.SubscriptionState) {
	t.Helper()
	idx, err := s.LoadSubscriptionIndex(t.Context(), "t", "sub")
	if err != nil {
		t.Fatalf("LoadSubscriptionIndex: %v", err)
	}
	wantIdx := want
	wantIdx.Parked = make([]store.Parked, len(want.Parked))
	seqs := []uint64{99, 4}
	for i, p := range want.Parked {
		p.Event = nil
		wantIdx.Parked[i] = p
		seqs = append(seqs, p.Seq, p.Seq)
	}
	checkState(t, what+": LoadSubscriptionIndex", idx, wantIdx)
	slices.Reverse(seqs)
	got, err := s.ParkedEvents(t.Context(), "t", "sub", seqs)
	if err != nil {
		t.Fatalf("ParkedEvents: %v", err)
	}
	checkState(t, what+": ParkedEvents", store.SubscriptionState{Cursor: want.Cursor, Probation: want.Probation, Parked: got}, store.SubscriptionState{Cursor: want.Cursor, Probation: want.Probation, Parked: want.Parked})
}

// Cursors reports every subscription's cursor as UpdateSubscription left it: a new one at
// LastSeq, never moving backwards, gone with its subscription, and per topic.
func testCursors(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "t")
	putTopic(t, s, "other")
	putSub(t, s, "other", "elsewhere")
	update(t, s, "other", "elsewhere", store.Update{Cursor: 40})
	steps := []struct {
		name string
		do   func()
		want map[string]uint64
	}{
		{name: "no subscriptions", do: func() {}, want: map[string]uint64{}},
		{
			name: "new subscriptions start at LastSeq",
			do: func() {
				putSub(t, s, "t", "early")
				appendOK(t, s, "t", t0, events("t", 0, 5))
				putSub(t, s, "t", "late")
			},
			want: map[string]uint64{"early": 0, "late": 5},
		},
		{
			name: "updates move them",
			do: func() {
				update(t, s, "t", "early", store.Update{Cursor: 3, Put: []store.Parked{parked(2, 1)}})
				appendOK(t, s, "t", t0, events("t", 5, 3))
				update(t, s, "t", "late", store.Update{Cursor: 8})
			},
			want: map[string]uint64{"early": 3, "late": 8},
		},
		{
			name: "a lower cursor and an update without one leave it",
			do: func() {
				update(t, s, "t", "late", store.Update{Cursor: 6})
				update(t, s, "t", "early", store.Update{Delete: []uint64{2}})
			},
			want: map[string]uint64{"early": 3, "late": 8},
		},
		{
			name: "replacing the spec keeps it",
			do: func() {
				if err := s.PutSubscription(ctx, "t", "early", []byte("v2")); err != nil {
					t.Fatalf("PutSubscription: %v", err)
				}
			},
			want: map[string]uint64{"early": 3, "late": 8},
		},
		{
			name: "a deleted subscription is gone",
			do: func() {
				if err := s.DeleteSubscription(ctx, "t", "late"); err != nil {
					t.Fatalf("DeleteSubscription: %v", err)
				}
			},
			want: map[string]uint64{"early": 3},
		},
		{
			name: "trimming changes none",
			do: func() {
				if err := s.Trim(ctx, "t", 3); err != nil {
					t.Fatalf("Trim: %v", err)
				}
			},
			want: map[string]uint64{"early": 3},
		},
	}
	for _, step := range steps {
		step.do()
		checkCursors(t, step.name, cursors(t, s, "t"), step.want)
	}
	checkCursors(t, "the other topic", cursors(t, s, "other"), map[string]uint64{"elsewhere": 40})
}

// Subscription state belongs to one subscription of one topic.
func testSubscriptionIsolation(t *testing.T, s store.Store) {
	for _, topic := range []string{"x", "y"} {
		putTopic(t, s, topic)
		putSub(t, s, topic, "a")
		putSub(t, s, topic, "b")
	}
	want := map[[2]string]store.SubscriptionState{
		{"x", "a"}: {Cursor: 4, Parked: []store.Parked{parked(2, 1)}},
		{"x", "b"}: {Cursor: 6, Parked: []store.Parked{parked(3, 2), parked(5, 1)}},
		{"y", "a"}: {Cursor: 1, Parked: []store.Parked{parked(1, 3)}},
		{"y", "b"}: {},
	}
	for key, st := range want {
		update(t, s, key[0], key[1], store.Update{Cursor: st.Cursor, Put: st.Parked})
	}
	for key, st := range want {
		checkState(t, key[0]+"/"+key[1], load(t, s, key[0], key[1]), st)
	}
}

// DeleteTopic releases the journal, subscriptions and their state; a topic created again
// under the same name starts empty and numbers from 1 (suite-defined, see doc.go).
func testDeleteTopic(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "gone")
	putTopic(t, s, "kept")
	putSub(t, s, "gone", "sub")
	putSub(t, s, "kept", "sub")
	appendOK(t, s, "gone", t0, events("gone", 0, 5))
	keptEvents := events("kept", 0, 2)
	appendOK(t, s, "kept", t0, keptEvents)
	update(t, s, "gone", "sub", store.Update{Cursor: 4, Put: []store.Parked{parked(2, 1)}})
	keptState := store.SubscriptionState{Cursor: 1, Parked: []store.Parked{parked(1, 1)}}
	update(t, s, "kept", "sub", store.Update{Cursor: 1, Put: keptState.Parked})

	if err := s.DeleteTopic(ctx, "gone"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	topics, err := s.Topics(ctx)
	if err != nil {
		t.Fatalf("Topics: %v", err)
	}
	checkDefs(t, "Topics after DeleteTopic", topics, []store.Definition{def("kept", `{"name":"kept"}`)})
	_, err = s.LastSeq(ctx, "gone")
	checkNotFound(t, "LastSeq of a deleted topic", err)
	_, err = s.Read(ctx, "gone", 0, 10)
	checkNotFound(t, "Read of a deleted topic", err)
	_, err = s.Subscriptions(ctx, "gone")
	checkNotFound(t, "Subscriptions of a deleted topic", err)
	_, err = s.LoadSubscription(ctx, "gone", "sub")
	checkNotFound(t, "LoadSubscription of a deleted topic", err)

	putTopic(t, s, "gone")
	if got := lastSeq(t, s, "gone"); got != 0 {
		t.Errorf("LastSeq of a re-created topic = %d, want 0", got)
	}
	checkEntries(t, "journal of a re-created topic", read(t, s, "gone", 0, 100), nil)
	subs, err := s.Subscriptions(ctx, "gone")
	if err != nil {
		t.Fatalf("Subscriptions of a re-created topic: %v", err)
	}
	checkDefs(t, "Subscriptions of a re-created topic", subs, nil)
	_, err = s.LoadSubscription(ctx, "gone", "sub")
	checkNotFound(t, "LoadSubscription of a re-created topic", err)

	fresh := events("fresh", 0, 2)
	if got := appendOK(t, s, "gone", t0, fresh); got != 2 {
		t.Errorf("first Append of 2 to a re-created topic returned %d, want 2 (numbering restarts at 1)", got)
	}
	checkEntries(t, "journal of a re-created topic", read(t, s, "gone", 0, 100), entries(1, t0, fresh))
	putSub(t, s, "gone", "sub")
	checkState(t, "subscription of a re-created topic", load(t, s, "gone", "sub"), store.SubscriptionState{Cursor: 2})

	// The other topic is untouched.
	checkEntries(t, "journal of the other topic", read(t, s, "kept", 0, 100), entries(1, t0, keptEvents))
	checkState(t, "subscription of the other topic", load(t, s, "kept", "sub"), keptState)
}

func testNotFound(t *testing.T, s store.Store) {
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Append to an unknown topic", func(ctx context.Context) error {
			_, err := s.Append(ctx, "ghost", t0, events("g", 0, 1))
			return err
		}},
		{"Read of an unknown topic", func(ctx context.Context) error { _, err := s.Read(ctx, "ghost", 0, 1); return err }},
		{"LastSeq of an unknown topic", func(ctx context.Context) error { _, err := s.LastSeq(ctx, "ghost"); return err }},
		{"Trim of an unknown topic", func(ctx context.Context) error { return s.Trim(ctx, "ghost", 1) }},
		{"DeleteTopic of an unknown topic", func(ctx context.Context) error { return s.DeleteTopic(ctx, "ghost") }},
		{"Subscriptions of an unknown topic", func(ctx context.Context) error { _, err := s.Subscriptions(ctx, "ghost"); return err }},
		{"PutSubscription on an unknown topic", func(ctx context.Context) error { return s.PutSubscription(ctx, "ghost", "sub", nil) }},
		{"DeleteSubscription on an unknown topic", func(ctx context.Context) error { return s.DeleteSubscription(ctx, "ghost", "sub") }},
		{"DeleteSubscription of an unknown subscription", func(ctx context.Context) error { return s.DeleteSubscription(ctx, "t", "ghost") }},
		{"LoadSubscription on an unknown topic", func(ctx context.Context) error { _, err := s.LoadSubscription(ctx, "ghost", "sub"); return err }},
		{"LoadSubscription of an unknown subscription", func(ctx context.Context) error { _, err := s.LoadSubscription(ctx, "t", "ghost"); return err }},
		{"LoadSubscriptionIndex on an unknown topic", func(ctx context.Context) error { _, err := s.LoadSubscriptionIndex(ctx, "ghost", "sub"); return err }},
		{"LoadSubscriptionIndex of an unknown subscription", func(ctx context.Context) error { _, err := s.LoadSubscriptionIndex(ctx, "t", "ghost"); return err }},
		{"ParkedEvents on an unknown topic", func(ctx context.Context) error {
			_, err := s.ParkedEvents(ctx, "ghost", "sub", []uint64{1})
			return err
		}},
		{"ParkedEvents of an unknown subscription", func(ctx context.Context) error { _, err := s.ParkedEvents(ctx, "t", "ghost", []uint64{1}); return err }},
		{"UpdateSubscription on an unknown topic", func(ctx context.Context) error {
			return s.UpdateSubscription(ctx, "ghost", "sub", store.Update{Cursor: 1})
		}},
		{"UpdateSubscription of an unknown subscription", func(ctx context.Context) error {
			return s.UpdateSubscription(ctx, "t", "ghost", store.Update{Cursor: 1})
		}},
		{"Cursors of an unknown topic", func(ctx context.Context) error { _, err := s.Cursors(ctx, "ghost"); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkNotFound(t, tc.name, tc.call(t.Context())) })
	}
	// A subscription of the same name on another topic is not found either.
	putTopic(t, s, "other")
	_, err := s.LoadSubscription(t.Context(), "other", "sub")
	checkNotFound(t, "LoadSubscription of a name only another topic has", err)
}

// Concurrent Appends get unique, contiguous sequence numbers: each Append's events are
// numbered last-n+1..last in order, and once Append returns they are readable.
func testConcurrentAppends(t *testing.T, s store.Store) {
	const writers, appendsPerWriter = 32, 16
	putTopic(t, s, "t")
	type appended struct {
		last uint64
		evs  []*schemas.Event
	}
	results := make([][]appended, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			ctx := t.Context()
			for i := range appendsPerWriter {
				evs := events(fmt.Sprintf("w%d-%d", w, i), 0, 1+(w+i)%3)
				last, err := s.Append(ctx, "t", t0, evs)
				if err != nil {
					t.Errorf("writer %d: Append: %v", w, err)
					return
				}
				first := last - uint64(len(evs)) + 1
				got, err := s.Read(ctx, "t", first, len(evs))
				if err != nil {
					t.Errorf("writer %d: Read: %v", w, err)
					return
				}
				checkEntries(t, fmt.Sprintf("writer %d reading back its Append", w), got, entries(first, t0, evs))
				results[w] = append(results[w], appended{last, evs})
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	var total int
	for _, rs := range results {
		for _, r := range rs {
			total += len(r.evs)
		}
	}
	want := make([]store.Entry, total)
	for w, rs := range results {
		for _, r := range rs {
			if r.last < uint64(len(r.evs)) || r.last > uint64(total) {
				t.Fatalf("writer %d: Append of %d returned %d, outside 1..%d", w, len(r.evs), r.last, total)
			}
			first := r.last - uint64(len(r.evs)) + 1
			for i, ev := range r.evs {
				seq := first + uint64(i)
				if want[seq-1].Event != nil {
					t.Fatalf("sequence number %d given to two Appends", seq)
				}
				want[seq-1] = store.Entry{Seq: seq, PublishTime: t0, Event: ev}
			}
		}
	}
	// Every number 1..total was given out exactly once, so the journal must hold exactly want.
	if got := lastSeq(t, s, "t"); got != uint64(total) {
		t.Errorf("LastSeq = %d after %d concurrently appended events, want %d", got, total, total)
	}
	checkEntries(t, "journal after concurrent appends", read(t, s, "t", 1, total+10), want)
}

// Appends to several topics, subscription updates and reads run concurrently; each
// goroutine owns what it checks, so the final state is exact.
func testConcurrentMixed(t *testing.T, s store.Store) {
	const topics, writersPerTopic, appendsPerWriter, updates = 3, 4, 10, 20
	for i := range topics {
		putTopic(t, s, fmt.Sprint("t", i))
		putSub(t, s, fmt.Sprint("t", i), "sub")
	}
	var wg sync.WaitGroup
	for i := range topics {
		topic := fmt.Sprint("t", i)
		for w := range writersPerTopic {
			wg.Go(func() {
				for j := range appendsPerWriter {
					if _, err := s.Append(t.Context(), topic, t0, events(fmt.Sprintf("%s-w%d-%d", topic, w, j), 0, 2)); err != nil {
						t.Errorf("Append(%s): %v", topic, err)
						return
					}
					if _, err := s.Read(t.Context(), topic, 0, 5); err != nil {
						t.Errorf("Read(%s): %v", topic, err)
						return
					}
				}
			})
		}
		wg.Go(func() {
			for j := range updates {
				seq := uint64(j + 1)
				u := store.Update{Cursor: seq, Put: []store.Parked{parked(seq, j%4)}}
				if j%2 == 1 {
					u.Delete = []uint64{seq - 1}
				}
				if err := s.UpdateSubscription(t.Context(), topic, "sub", u); err != nil {
					t.Errorf("UpdateSubscription(%s): %v", topic, err)
					return
				}
				if _, err := s.LoadSubscription(t.Context(), topic, "sub"); err != nil {
					t.Errorf("LoadSubscription(%s): %v", topic, err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Update j puts seq j+1, and an odd j deletes seq j, put by update j-1: the odd seqs are
	// deleted again and the even ones 2, 4, …, 20 stay.
	want := store.SubscriptionState{Cursor: updates}
	for j := 1; j < updates; j += 2 {
		want.Parked = append(want.Parked, parked(uint64(j+1), j%4))
	}
	for i := range topics {
		topic := fmt.Sprint("t", i)
		if got := lastSeq(t, s, topic); got != writersPerTopic*appendsPerWriter*2 {
			t.Errorf("LastSeq(%s) = %d, want %d", topic, got, writersPerTopic*appendsPerWriter*2)
		}
		checkState(t, "state of "+topic, load(t, s, topic, "sub"), want)
	}
}

// Every method fails after Close, and Close is idempotent.
func testClosed(t *testing.T, s store.Store) {
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	appendOK(t, s, "t", t0, events("t", 0, 2))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v, want nil (Close is idempotent)", err)
	}
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Append", func(ctx context.Context) error { _, err := s.Append(ctx, "t", t0, events("t", 2, 1)); return err }},
		{"Read", func(ctx context.Context) error { _, err := s.Read(ctx, "t", 0, 10); return err }},
		{"LastSeq", func(ctx context.Context) error { _, err := s.LastSeq(ctx, "t"); return err }},
		{"Trim", func(ctx context.Context) error { return s.Trim(ctx, "t", 1) }},
		{"LoadSubscription", func(ctx context.Context) error { _, err := s.LoadSubscription(ctx, "t", "sub"); return err }},
		{"UpdateSubscription", func(ctx context.Context) error {
			return s.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 1})
		}},
		{"PutTopic", func(ctx context.Context) error { return s.PutTopic(ctx, "u", nil) }},
		{"CreateTopic", func(ctx context.Context) error { return s.CreateTopic(ctx, "u", nil) }},
		{"DeleteTopic", func(ctx context.Context) error { return s.DeleteTopic(ctx, "t") }},
		{"Topics", func(ctx context.Context) error { _, err := s.Topics(ctx); return err }},
		{"PutSubscription", func(ctx context.Context) error { return s.PutSubscription(ctx, "t", "sub2", nil) }},
		{"CreateSubscription", func(ctx context.Context) error { return s.CreateSubscription(ctx, "t", "sub2", nil) }},
		{"SwapSubscription", func(ctx context.Context) error {
			return s.SwapSubscription(ctx, "t", "sub", []byte(`{"sub":"sub"}`), []byte("x"))
		}},
		{"DeleteSubscription", func(ctx context.Context) error { return s.DeleteSubscription(ctx, "t", "sub") }},
		{"Subscriptions", func(ctx context.Context) error { _, err := s.Subscriptions(ctx, "t"); return err }},
		{"Cursors", func(ctx context.Context) error { _, err := s.Cursors(ctx, "t"); return err }},
		{"PutDeadLetters", func(ctx context.Context) error {
			return s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "1", Payload: []byte("x")}})
		}},
		{"DeadLetters", func(ctx context.Context) error { _, err := s.DeadLetters(ctx); return err }},
		{"ScanDeadLetters", func(ctx context.Context) error {
			return s.ScanDeadLetters(ctx, func(store.DeadLetterRecord) error { return nil })
		}},
		{"DeadLettersByID", func(ctx context.Context) error { _, err := s.DeadLettersByID(ctx, []string{"1"}); return err }},
		{"DeleteDeadLetters", func(ctx context.Context) error { return s.DeleteDeadLetters(ctx, []string{"1"}) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(t.Context()); err == nil {
				t.Errorf("%s after Close returned nil error, want an error", tc.name)
			}
		})
	}
}

// The probation state is opaque bytes kept per subscription: nil leaves it, empty clears it,
// it is written in the same update as the cursor and goes with the subscription.
func testProbationState(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	putSub(t, s, "t", "other")
	appendOK(t, s, "t", t0, events("t", 0, 3))
	checkState(t, "new subscription", load(t, s, "t", "sub"), store.SubscriptionState{})

	update(t, s, "t", "sub", store.Update{Cursor: 2, Probation: []byte("on probation")})
	checkState(t, "cursor and probation in one update", load(t, s, "t", "sub"),
		store.SubscriptionState{Cursor: 2, Probation: []byte("on probation")})
	checkState(t, "the other subscription", load(t, s, "t", "other"), store.SubscriptionState{})

	update(t, s, "t", "sub", store.Update{Cursor: 3, Put: []store.Parked{parked(3, 1)}})
	checkState(t, "update without probation", load(t, s, "t", "sub"),
		store.SubscriptionState{Cursor: 3, Parked: []store.Parked{parked(3, 1)}, Probation: []byte("on probation")})

	update(t, s, "t", "sub", store.Update{Probation: []byte("escalated")})
	if got := load(t, s, "t", "sub").Probation; string(got) != "escalated" {
		t.Errorf("replaced probation = %q, want %q", got, "escalated")
	}

	// The caller's slices are not kept.
	buf := []byte("mine")
	update(t, s, "t", "other", store.Update{Probation: buf})
	buf[0] = 'X'
	got := load(t, s, "t", "other").Probation
	if string(got) != "mine" {
		t.Errorf("probation after the caller changed its slice = %q, want %q", got, "mine")
	}
	got[0] = 'Y'
	if got := load(t, s, "t", "other").Probation; string(got) != "mine" {
		t.Errorf("probation after the caller changed a loaded slice = %q, want %q", got, "mine")
	}

	update(t, s, "t", "sub", store.Update{Probation: []byte{}})
	checkState(t, "cleared probation", load(t, s, "t", "sub"),
		store.SubscriptionState{Cursor: 3, Parked: []store.Parked{parked(3, 1)}})

	// Deleted with the subscription and with the topic.
	update(t, s, "t", "sub", store.Update{Probation: []byte("again")})
	if err := s.DeleteSubscription(ctx, "t", "sub"); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	putSub(t, s, "t", "sub")
	checkState(t, "recreated subscription", load(t, s, "t", "sub"), store.SubscriptionState{Cursor: 3})
	if err := s.DeleteTopic(ctx, "t"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	putTopic(t, s, "t")
	putSub(t, s, "t", "other")
	checkState(t, "subscription of a recreated topic", load(t, s, "t", "other"), store.SubscriptionState{})
}

// deadLetters lists the outbox as "id=payload;..." in ID order, and checks that the three
// ways of reading it agree: DeadLetters, ScanDeadLetters (in any order, each record once) and
// DeadLettersByID of the listed ids.
func deadLetters(t *testing.T, s store.Store) string {
	t.Helper()
	ctx := t.Context()
	recs, err := s.DeadLetters(ctx)
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	list := func(recs []store.DeadLetterRecord) string {
		var b strings.Builder
		for _, r := range recs {
			fmt.Fprintf(&b, "%s=%s;", r.ID, r.Payload)
		}
		return b.String()
	}
	got := list(recs)
	var scanned []store.DeadLetterRecord
	if err := s.ScanDeadLetters(ctx, func(r store.DeadLetterRecord) error {
		scanned = append(scanned, r)
		return nil
	}); err != nil {
		t.Fatalf("ScanDeadLetters: %v", err)
	}
	slices.SortStableFunc(scanned, func(a, b store.DeadLetterRecord) int { return strings.Compare(a.ID, b.ID) })
	if s := list(scanned); s != got {
		t.Errorf("ScanDeadLetters gave %q, DeadLetters %q", s, got)
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[len(recs)-1-i] = r.ID // in reverse: any order is taken
	}
	byID, err := s.DeadLettersByID(ctx, ids)
	if err != nil {
		t.Fatalf("DeadLettersByID: %v", err)
	}
	if s := list(byID); s != got {
		t.Errorf("DeadLettersByID(%q) gave %q, DeadLetters %q", ids, s, got)
	}
	return got
}

// The outbox read a record at a time (ScanDeadLetters) and by ID (DeadLettersByID): what a
// reader is given is its own, an error of the scan's callback ends the scan and comes back as
// it is, and ids not in the outbox or asked twice are left out or given once.
func testDeadLetterReads(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "0003", Payload: []byte("c")}, {ID: "0001", Payload: []byte("a")}, {ID: "0002", Payload: []byte("b")}}); err != nil {
		t.Fatalf("PutDeadLetters: %v", err)
	}
	stop := errors.New("enough")
	calls := 0
	err := s.ScanDeadLetters(ctx, func(r store.DeadLetterRecord) error {
		calls++
		r.Payload[0] = 'X' // the reader's own copy
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("ScanDeadLetters whose callback fails: %v after %d calls, want its error after 1", err, calls)
	}
	byID, err := s.DeadLettersByID(ctx, []string{"0003", "0009", "0001", "0003"})
	if err != nil {
		t.Fatalf("DeadLettersByID: %v", err)
	}
	if len(byID) != 2 || byID[0].ID != "0001" || byID[1].ID != "0003" {
		t.Fatalf("DeadLettersByID(0003, 0009, 0001, 0003) = %+v, want 0001 and 0003 in order", byID)
	}
	byID[0].Payload[0] = 'X'
	if byID, err := s.DeadLettersByID(ctx, nil); err != nil || len(byID) != 0 {
		t.Errorf("DeadLettersByID(nil) = %+v, %v; want nothing", byID, err)
	}
	if got, want := deadLetters(t, s), "0001=a;0002=b;0003=c;"; got != want {
		t.Errorf("outbox after the reads changed what they gave = %q, want %q", got, want)
	}
}

// The dead-letter outbox: records by ID, listed in ID order, replaced by ID, deleted by ID,
// independent of topics.
func testDeadLetterOutbox(t *testing.T, s store.Store) {
	ctx := t.Context()
	if got := deadLetters(t, s); got != "" {
		t.Fatalf("new store's outbox = %q, want empty", got)
	}
	payload := []byte("b1")
	if err := s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "0002", Payload: payload}, {ID: "0001", Payload: []byte("a1")}}); err != nil {
		t.Fatalf("PutDeadLetters: %v", err)
	}
	payload[0] = 'X' // the store keeps its own copy
	if got, want := deadLetters(t, s), "0001=a1;0002=b1;"; got != want {
		t.Fatalf("outbox = %q, want %q", got, want)
	}
	if err := s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "0001", Payload: []byte("a2")}, {ID: "0003", Payload: []byte("c1")}}); err != nil {
		t.Fatalf("PutDeadLetters: %v", err)
	}
	if got, want := deadLetters(t, s), "0001=a2;0002=b1;0003=c1;"; got != want {
		t.Fatalf("outbox after replacing 0001 = %q, want %q", got, want)
	}
	putTopic(t, s, "t")
	if err := s.DeleteTopic(ctx, "t"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if err := s.DeleteDeadLetters(ctx, []string{"0002", "0009"}); err != nil {
		t.Fatalf("DeleteDeadLetters: %v", err)
	}
	if got, want := deadLetters(t, s), "0001=a2;0003=c1;"; got != want {
		t.Fatalf("outbox after deleting 0002 = %q, want %q", got, want)
	}
	if err := s.PutDeadLetters(ctx, nil); err != nil {
		t.Fatalf("PutDeadLetters(nil): %v", err)
	}
	if err := s.DeleteDeadLetters(ctx, nil); err != nil {
		t.Fatalf("DeleteDeadLetters(nil): %v", err)
	}
}

// An update that settles events also puts their dead-letter records, all or nothing: the
// records are in the outbox exactly when the cursor moved, and an update that fails (unknown
// subscription) puts none.
func testUpdateHandsDeadLettersOver(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	appendOK(t, s, "t", t0, events("t", 0, 3))
	update(t, s, "t", "sub", store.Update{Cursor: 1, Put: []store.Parked{parked(2, 1)}})
	payload := []byte("e2")
	update(t, s, "t", "sub", store.Update{
		Cursor: 3, Delete: []uint64{2},
		DeadLetters: []store.DeadLetterRecord{{ID: "0002", Payload: payload}, {ID: "0001", Payload: []byte("e1")}},
	})
	payload[0] = 'X' // the store keeps its own copy
	st, err := s.LoadSubscription(ctx, "t", "sub")
	if err != nil {
		t.Fatalf("LoadSubscription: %v", err)
	}
	if st.Cursor != 3 || len(st.Parked) != 0 {
		t.Errorf("state after the update = cursor %d, %d parked; want cursor 3, none parked", st.Cursor, len(st.Parked))
	}
	if got, want := deadLetters(t, s), "0001=e1;0002=e2;"; got != want {
		t.Errorf("outbox after the update = %q, want %q", got, want)
	}
	err = s.UpdateSubscription(ctx, "t", "ghost", store.Update{Cursor: 3, DeadLetters: []store.DeadLetterRecord{{ID: "0003", Payload: []byte("e3")}}})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("update of an unknown subscription: %v, want ErrNotFound", err)
	}
	if got, want := deadLetters(t, s), "0001=e1;0002=e2;"; got != want {
		t.Errorf("outbox after a failed update = %q, want %q: nothing of it applied", got, want)
	}
	// An update with only dead letters is not empty.
	update(t, s, "t", "sub", store.Update{DeadLetters: []store.DeadLetterRecord{{ID: "0001", Payload: []byte("e1b")}}})
	if got, want := deadLetters(t, s), "0001=e1b;0002=e2;"; got != want {
		t.Errorf("outbox after replacing 0001 = %q, want %q", got, want)
	}
}
