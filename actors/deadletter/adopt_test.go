package deadletter_test

import (
	"context"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// A record adopted from another node's outbox (a subscription that moved here) whose object
// that node had already started to write is written under that object's key, as a restart
// does: the other node's write may have landed before it went away, so a new key would put the
// ending in two objects.
func TestAdoptedRecordKeepsItsObject(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := store.NewMemory()
		outbox := storeOutbox(t, st)
		objs := testkit.NewObjectStore()
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: objs, Outbox: outbox, NewID: sequentialIDs()}))
		h.Settle() // the outbox is loaded (empty)

		// The other node saved the record with its object's key, and its write landed; it
		// stopped before it could remove the record from the outbox.
		now := time.Now()
		target := dlTarget("sub-a", false)
		key := deadletter.Key(target.Prefix, now.Add(-time.Minute), "theirs")
		rec := deadletter.Record{
			ID: 3*deadletter.IDSpan + 1, Letter: dlLetter(t, "sub-a", "a1", now.Add(-10*time.Minute)), Target: target,
			Due: now.Add(-5 * time.Minute), FirstWriteAttempt: now.Add(-time.Minute), WriteAttempts: 1, ObjectKey: key,
		}
		if err := outbox.Put(ctx, []deadletter.Record{rec}); err != nil {
			t.Fatal(err)
		}
		body, err := schemas.AppendDeadLetters(nil, target.Format, []schemas.DeadLetterRecord{{
			Event: rec.Letter.Event, Reason: rec.Letter.Reason, DeliveryAttempts: rec.Letter.DeliveryAttempts,
			LastOutcome: rec.Letter.LastOutcome, LastHTTPStatus: rec.Letter.LastHTTPStatus,
			PublishTime: rec.Letter.PublishTime, LastAttemptTime: rec.Letter.LastAttemptTime,
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := objs.Put(ctx, target.Bucket, key, body, sinks.PutOptions{ContentType: schemas.ContentTypeDeadLetters}); err != nil {
			t.Fatal(err)
		}

		if err := outbox.Adopt(ctx, h.System().Root, pid, func(string, string) (bool, error) { return true, nil }); err != nil {
			t.Fatal(err)
		}
		h.Advance(deadletter.DefaultDelay + time.Hour)

		var keys []string
		for _, o := range objs.Objects(target.Bucket) {
			keys = append(keys, o.Key)
		}
		if len(keys) != 1 || keys[0] != key {
			t.Errorf("objects %v, want only %s: the adopted record written again under its object's key", keys, key)
		}
		if got, err := outbox.Load(ctx); err != nil || len(got) != 0 {
			t.Errorf("outbox after the write: %d records, %v; want none", len(got), err)
		}
	})
}

// An object written whole whose records left the outbox only in part (a store that deletes
// one key at a time, stopped or failing half way; or an adoption that read the outbox during
// the delete) is not written again with the records that are left: that would replace it with
// an object missing the others. Its remaining records leave the outbox, the object stays as
// it is.
func TestObjectWrittenIsNotReplacedByTheRecordsLeftOfIt(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := store.NewMemory()
		outbox := storeOutbox(t, st)
		objs := testkit.NewObjectStore()
		now := time.Now()
		target := dlTarget("sub-a", false)
		key := deadletter.Key(target.Prefix, now.Add(-time.Minute), "written")
		var recs []deadletter.Record
		var body []schemas.DeadLetterRecord
		for i, id := range []string{"a1", "a2"} {
			l := dlLetter(t, "sub-a", id, now.Add(-10*time.Minute))
			recs = append(recs, deadletter.Record{
				ID: uint64(i + 1), Letter: l, Target: target, Due: now.Add(-5 * time.Minute),
				FirstWriteAttempt: now.Add(-time.Minute), WriteAttempts: 1, ObjectKey: key,
			})
			body = append(body, schemas.DeadLetterRecord{
				Event: l.Event, Reason: l.Reason, DeliveryAttempts: l.DeliveryAttempts, LastOutcome: l.LastOutcome,
				LastHTTPStatus: l.LastHTTPStatus, PublishTime: l.PublishTime, LastAttemptTime: l.LastAttemptTime,
			})
		}
		b, err := schemas.AppendDeadLetters(nil, target.Format, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := objs.Put(ctx, target.Bucket, key, b, sinks.PutOptions{ContentType: schemas.ContentTypeDeadLetters}); err != nil {
			t.Fatal(err)
		}
		if err := outbox.Put(ctx, recs[1:]); err != nil { // a1 already deleted, a2 not yet
			t.Fatal(err)
		}

		h.Spawn(deadletter.Props(&deadletter.Config{Store: objs, Outbox: outbox, NewID: sequentialIDs()}))
		h.Advance(deadletter.DefaultDelay + time.Hour)

		var ids []string
		for _, r := range objs.Records(t, target.Bucket, target.Prefix, schemas.EventGrid, dlTopicID) {
			ids = append(ids, r.Event.ID)
		}
		if len(ids) != 2 || ids[0] != "a1" || ids[1] != "a2" {
			t.Errorf("sub-a's objects hold %v, want a1 and a2, each once", ids)
		}
		if got, err := outbox.Load(ctx); err != nil || len(got) != 0 {
			t.Errorf("outbox: %d records, %v; want none", len(got), err)
		}
	})
}
