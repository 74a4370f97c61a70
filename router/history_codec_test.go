package router

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// fullExplanation sets every field the history writer sets, a state without a one-byte code,
// a zero and a non-zero time, and two attempts that differ in every field.
func fullExplanation() Explanation {
	at := func(s int64, ns int64) time.Time { return time.Unix(s, ns) }
	return Explanation{
		EventID: "6f1c2a", PublishTime: at(1795430561, 118000000), State: "Paused", EarlierAttempts: 3,
		AttemptsMade: 5, MaxDeliveryAttempts: 30, NextAttempt: at(1795430600, 1), Deadline: at(1795516961, 118000000),
		Reason: schemas.Reason("TimeToLiveExceeded"),
		Attempts: []ExplainedAttempt{
			{
				Attempt: 4, Time: at(1795430562, 5), Duration: 87 * time.Millisecond, Outcome: "Busy", StatusCode: 503,
				Response: "Busy (HTTP 503): https://billing.example.com/hook?… answered 503", HeldBack: -2 * time.Second,
				Probe: true, Decision: "Retry", Rule: "Floor", Explanation: "503: floor 30s (over schedule step 1 = 10s)",
				Due: at(1795430592, 999999999),
			},
			{Attempt: 5, Time: at(1795430600, 0), NoAttempt: true, Explanation: "delivered", HeldBack: time.Hour},
		},
	}
}

// The binary form gives back what was encoded, field for field, with the event id taken
// from the store's key; every state has its code.
func TestHistoryBinaryRoundTrip(t *testing.T) {
	cases := []Explanation{fullExplanation(), {
		EventID: "e-1", PublishTime: time.Unix(1795430561, 0), State: EventDelivered, AttemptsMade: 1, MaxDeliveryAttempts: 30,
		Deadline: time.Unix(1795516961, 0),
		Attempts: []ExplainedAttempt{{Attempt: 1, Time: time.Unix(1795430561, 2e6), Duration: time.Millisecond, Outcome: "Delivered", Explanation: "delivered"}},
	}}
	for _, s := range []EventState{EventRetrying, EventDeadLettered, EventDropped, EventLocked, EventAvailable} {
		e := fullExplanation()
		e.State = s
		cases = append(cases, e)
	}
	// A queue subscription's pull steps, beside a push attempt.
	pull := fullExplanation()
	pull.State = EventLocked
	pull.Attempts = append(pull.Attempts,
		ExplainedAttempt{Attempt: 2, Time: time.Unix(1795430601, 7), Step: "Received", LockedUntil: time.Unix(1795430661, 7), Explanation: "received (delivery 2 of 2), locked until 12:04:21"},
		ExplainedAttempt{Attempt: 2, Time: time.Unix(1795430602, 0), Step: "Released", Decision: "Drop", Rule: "MaxAttempts", Explanation: "released: attempt 2 of maxDeliveryAttempts 2 → Drop (MaxDeliveryAttemptsExceeded)"})
	cases = append(cases, pull)
	// Attempts cut by a stop, counted apart: format 2.
	cut := fullExplanation()
	cut.CutAttempts = 2
	cut.Attempts[0].Rule, cut.Attempts[0].Outcome = "Stopped", "Canceled"
	cases = append(cases, cut)
	for _, want := range cases {
		b := appendExplanation(nil, &want)
		format := historyFormatBinary // what releases before cut attempts were counted apart read
		if want.CutAttempts != 0 {
			format = historyFormatCut
		}
		if b[0] != format {
			t.Fatalf("first byte %d, want %d", b[0], format)
		}
		got := Explanation{Attempts: make([]ExplainedAttempt, 0, 1)}
		if err := decodeExplanation(b, want.EventID, &got); err != nil {
			t.Fatalf("decoding %x: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decoded\n%+v\nwant\n%+v", got, want)
		}
	}
}

// Every strict prefix of a history in the binary form, and a byte more, is refused as
// malformed, as is a first byte of neither form.
func TestHistoryBinaryRefusesDamage(t *testing.T) {
	e := fullExplanation()
	cut := fullExplanation()
	cut.CutAttempts = 1
	for _, e := range []Explanation{e, cut} {
		b := appendExplanation(nil, &e)
		var got Explanation
		for n := range len(b) {
			if err := decodeExplanation(b[:n], "6f1c2a", &got); !errors.Is(err, errHistoryFormat) {
				t.Fatalf("format %d: the first %d of %d bytes decoded with error %v, want malformed", b[0], n, len(b), err)
			}
		}
		if err := decodeExplanation(append(b, 0), "6f1c2a", &got); !errors.Is(err, errHistoryFormat) {
			t.Errorf("format %d: a byte too many: %v, want malformed", b[0], err)
		}
		b[0] = 3
		if err := decodeExplanation(b, "6f1c2a", &got); !errors.Is(err, errHistoryFormat) {
			t.Errorf("unknown format: %v, want malformed", err)
		}
	}
}

// historyFormat1 is a history in format 1 as the release before cut attempts were counted
// apart wrote it (appendExplanation of a delivered first attempt), byte for byte.
const historyFormat1 = "0102a19fd894ee010000023c0000a1c2dd94ee0100000102a19fd894ee0180897a80897a09" +
	"44656c6976657265640000000000000964656c6976657265640000"

// A history written in format 1, before cut attempts were counted apart, still decodes, with
// no cut attempts; and a history without cut attempts is still written byte for byte so, so
// a release that reads only format 1 still explains it.
func TestHistoryFormat1StillReadAndWritten(t *testing.T) {
	b, err := hex.DecodeString(historyFormat1)
	if err != nil {
		t.Fatal(err)
	}
	var got Explanation
	if err := decodeExplanation(b, "e-1", &got); err != nil {
		t.Fatalf("decoding a format 1 history: %v", err)
	}
	if got.State != EventDelivered || got.AttemptsMade != 1 || got.CutAttempts != 0 || got.MaxDeliveryAttempts != 30 || len(got.Attempts) != 1 {
		t.Fatalf("decoded %+v, want delivered after 1 of 30 attempts, none cut", got)
	}
	if again := appendExplanation(nil, &got); !bytes.Equal(again, b) {
		t.Errorf("written again as %x, want the format 1 bytes %x", again, b)
	}
}

// jsonHistory is a delivery history as egrid wrote it before the binary form (JSON), of a 503
// answered with a retry: the value the writer stored after the first attempt, taken from a
// run of that build.
const jsonHistory = `{"topic":"","subscription":"","eventId":"6f1c2a","publishTime":"2026-11-23T12:02:41.118Z","state":"Retrying","attempts":[{"attempt":1,"time":"2026-11-23T12:02:41.123Z","duration":87000000,"outcome":"Busy","statusCode":503,"response":"Busy (HTTP 503): https://billing.example.com/hook?… answered 503 Service Unavailable","decision":"Retry","rule":"Floor","explanation":"503: floor 30s (over schedule step 1 = 10s), jitter +4.9%, due 12:03:12","due":"2026-11-23T12:03:12.681933677Z"}],"attemptsMade":1,"maxDeliveryAttempts":30,"nextAttempt":"2026-11-23T12:03:12.681933677Z","deadline":"2026-11-24T12:02:41.118Z"}`

// A store written before the binary form still explains: a history stored as JSON (in the
// memory and the disk store) is explained as it was, and the next attempt adds to it,
// rewriting it in the binary form.
func TestExplainReadsJSONHistory(t *testing.T) {
	for _, kind := range []string{"memory", "disk"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var st store.Store = store.NewMemory()
			if kind == "disk" {
				d, err := disk.Open(filepath.Join(t.TempDir(), "store"), disk.Options{})
				if err != nil {
					t.Fatal(err)
				}
				st = d
			}
			t.Cleanup(func() { _ = st.Close() })
			r, err := New(Config{InsecureDev: true}, Deps{
				Store: st, Sinks: map[string]sinks.Sink{"null": sinks.Func(func(context.Context, *sinks.Batch) error { return nil })},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close(context.Background()) })
			if _, err := r.CreateTopic(ctx, "orders", TopicSpec{}); err != nil {
				t.Fatal(err)
			}
			if err := r.CreateSubscription(ctx, "orders", "billing", SubscriptionSpec{Destination: SinkDestination("null")}); err != nil {
				t.Fatal(err)
			}
			// Moved to today: the second attempt's history expires a day after it, so the
			// stored dates would make it expired the day after they were written.
			today := time.Now().UTC()
			history := strings.NewReplacer("2026-11-23", today.Format(time.DateOnly), "2026-11-24", today.AddDate(0, 0, 1).Format(time.DateOnly)).Replace(jsonHistory)
			var want Explanation
			if err := json.Unmarshal([]byte(history), &want); err != nil {
				t.Fatal(err)
			}
			// Kept, as the writer keeps a retrying history, past its next attempt, when the
			// second attempt below reads it, and past now, when Explain reads it: which is later
			// depends on the time of day the test runs.
			expires := want.NextAttempt.Add(time.Hour)
			if now := time.Now().Add(time.Hour); now.After(expires) {
				expires = now
			}
			if err := st.PutHistory(ctx, "orders", "billing", 0, []store.HistoryRecord{{EventID: "6f1c2a", Expires: expires, Payload: []byte(history)}}); err != nil {
				t.Fatal(err)
			}

			e, err := r.Explain(ctx, "orders", "billing", "6f1c2a")
			if err != nil {
				t.Fatalf("Explain: %v", err)
			}
			if e.State != EventRetrying || e.EventID != "6f1c2a" || e.Topic != "orders" || e.Subscription != "billing" ||
				e.AttemptsMade != 1 || e.AttemptsLeft != 29 || !e.NextAttempt.Equal(want.NextAttempt) || !e.PublishTime.Equal(want.PublishTime) {
				t.Fatalf("explained %+v, want the stored history retrying", e)
			}
			if !reflect.DeepEqual(e.Attempts, want.Attempts) {
				t.Fatalf("attempts %+v, want %+v", e.Attempts, want.Attempts)
			}

			// The second attempt, at the first one's due time, is delivered.
			due := want.Attempts[0].Due
			r.history.enqueue(&actors.AttemptRecord{
				Topic: "orders", Subscription: "billing", EventIDs: []string{"6f1c2a"}, Attempts: []int{2},
				Time: due, Duration: 41 * time.Millisecond, Outcome: schemas.Delivered,
				Decisions: []retry.Decision{{}}, PublishTimes: []time.Time{want.PublishTime},
			}, &retry.Policy{})
			e, err = r.Explain(ctx, "orders", "billing", "6f1c2a")
			if err != nil {
				t.Fatalf("Explain after the second attempt: %v", err)
			}
			if e.State != EventDelivered || e.AttemptsMade != 2 || len(e.Attempts) != 2 || !e.NextAttempt.IsZero() {
				t.Fatalf("explained %+v, want delivered after 2 attempts", e)
			}
			if first := e.Attempts[0]; first.Explanation != want.Attempts[0].Explanation || !first.Due.Equal(due) || first.Response != want.Attempts[0].Response {
				t.Errorf("first attempt %+v, want the stored one %+v", first, want.Attempts[0])
			}
			if second := e.Attempts[1]; second.Attempt != 2 || !second.Time.Equal(due) || second.Outcome != "Delivered" || second.Explanation != "delivered" {
				t.Errorf("second attempt %+v, want delivered at %s", second, due)
			}
			rec, err := st.History(ctx, "orders", "billing", "6f1c2a", due)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Payload[0] != historyFormatBinary {
				t.Errorf("rewritten history starts with %q, want the binary form", rec.Payload[0])
			}
		})
	}
}
