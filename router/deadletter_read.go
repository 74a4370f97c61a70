package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
)

// DeadLetterQuery selects dead-letter objects and records.
type DeadLetterQuery struct {
	// Key, when set, selects that one object.
	Key string
	// Since and Until select objects written in [Since, Until); zero means unbounded.
	Since, Until time.Time
	// After, with Since, leaves out the objects written at Since whose keys are not after it:
	// [DeadLetterList.Next] and [DeadLetterList.After] take up where an answer stopped.
	After string
	// Reason, when set, selects records with that deadLetterReason.
	Reason schemas.Reason
	// Offset leaves out the first Offset records selected (of the objects from Since and
	// After on) by [Router.DeadLetterRecords]: with Since and After, [DeadLetterRead.Next],
	// [DeadLetterRead.After] and [DeadLetterRead.Offset] take up inside an object an answer
	// did not wholly hold (one may hold 5,000 records, more than a limit).
	Offset int
	// Limit, when positive, bounds the records [Router.DeadLetterRecords] answers with: it
	// stops at Limit records, or once the events of those it holds take
	// [MaxDeadLetterReadBytes], and reads no object past that point. Zero reads every object
	// selected. It bounds the objects [Router.DeadLetterObjects] answers with likewise (zero:
	// all of them).
	Limit int
}

// DefaultDeadLetterLimit is the records limit of the admin API's and egrid deadletter show's
// answers, and the objects limit of egrid deadletter list's, when none is asked for.
const DefaultDeadLetterLimit = 1000

// MaxDeadLetterLimit bounds the limit the admin API takes for one answer (records or objects):
// an answer of objects is held whole before it is written, so a client pages past it with
// ?after= rather than asking for a bucket's listing at once.
const MaxDeadLetterLimit = 10000

// MaxDeadLetterReadBytes bounds the events of the records [Router.DeadLetterRecords] answers
// with, when [DeadLetterQuery.Limit] is set: the records of many large events stop the answer
// before the limit, so it holds about one dead-letter object's worth (plus the object being
// read). The first record selected is always answered, whatever its size.
const MaxDeadLetterReadBytes = 64 << 20

// DeadLetterEntry is one record read back from a dead-letter object.
type DeadLetterEntry struct {
	// Object is the key of the object holding the record.
	Object string
	// Written is when the object was written.
	Written time.Time
	schemas.DeadLetterRecord
}

// DeadLetterRead is what [Router.DeadLetterRecords] found.
type DeadLetterRead struct {
	// Objects counts the objects read.
	Objects int
	// Entries are the records selected, in object order.
	Entries []DeadLetterEntry
	// Problems lists the objects that could not be read or decoded, and the records that
	// could not be decoded (the object's key, the record's index in it and why; its other
	// records are read), one message each: at most the first 100 ([MaxListedProblems]);
	// UnlistedProblems counts the others.
	Problems         []string
	UnlistedProblems int
	// More is set when the answer stopped at [DeadLetterQuery.Limit] (or
	// [MaxDeadLetterReadBytes]) with records or objects left: Left records selected of the last
	// object read are not in Entries, and Unread objects selected were not read at all.
	More bool
	// Left counts the records selected of the last object read that are not in Entries.
	Left int
	// Unread counts the objects selected that were not read because the answer was full.
	Unread int
	// Next, when More is set, is when the first object not wholly in Entries was written: a
	// query with Since set to it, After and Offset takes up with the first record not in
	// Entries. Since alone takes up from that object (its records in Entries again).
	Next time.Time
	// After and Offset, when More is set, are the continuation's: After leaves out the objects
	// written at Next up to its key, and Offset the records selected after those that the
	// query and this answer went past (DeadLetterQuery.After and Offset).
	After  string
	Offset int
}

// deadLetterSource returns the store, bucket and prefix of a subscription's dead letters and
// its topic.
func (r *Router) deadLetterSource(topic, name string) (*topicRuntime, *SubscriptionSpec, string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, nil, "", ErrClosed
	}
	t, spec, name, err := r.lookupLocked(topic, name)
	if err != nil {
		return nil, nil, "", err
	}
	topic = t.name
	if r.dead == nil {
		return nil, nil, "", ErrDeadLettersUnavailable
	}
	if spec.DeadLetterDestination == nil {
		return nil, nil, "", fmt.Errorf("event subscription %q of topic %q: %w", name, topic, ErrNoDeadLetterDestination)
	}
	prefix := deadletter.Prefix("", topic, name)
	if t.load().spec.Kind == KindNamespace {
		prefix = deadletter.Prefix(r.cfg.DeadLetters.Namespace, topic, name)
	}
	return t, spec, prefix + "/", nil
}

// DeadLetterList is what [Router.DeadLetterObjects] answers.
type DeadLetterList struct {
	// Objects are the objects selected, ordered by the time they were written.
	Objects []sinks.ObjectInfo
	// More is set when the answer stopped at [DeadLetterQuery.Limit] with Unlisted objects
	// selected left out. A query with Since set to Next and After to After (the time and key of
	// the last object answered) takes up with the next one.
	More     bool
	Unlisted int
	Next     time.Time
	After    string
}

// DeadLetterObjects lists a subscription's dead-letter objects written in [q.Since, q.Until),
// ordered by the time they were written (then by key), at most q.Limit of them when it is set.
// Only the topic's objects are listed: a subscription of the same name on another topic writes
// under the same key prefix when both dead-letter to one bucket (Event Grid's classic key names
// only the subscription), and each object names its topic in its metadata
// ([deadletter.BelongsTo]). An object without that metadata, written before egrid wrote it, is
// taken to be the topic's.
//
// It holds a page of the store's listing and the objects it answers (and those of one hour of
// keys), not the listing: see dlWalk.
func (r *Router) DeadLetterObjects(ctx context.Context, topic, name string, q DeadLetterQuery) (*DeadLetterList, error) {
	t, spec, prefix, err := r.deadLetterSource(topic, name)
	if err != nil {
		return nil, err
	}
	if err := q.Check(); err != nil {
		return nil, err
	}
	w, err := r.walkDeadLetters(ctx, t.name, spec.DeadLetterDestination.Properties.BlobContainerName, prefix, q, false)
	if err != nil {
		return nil, deadLettersUnavailable(name, err)
	}
	out := &DeadLetterList{}
	for o, err := range w.all(ctx) {
		if err != nil {
			return nil, deadLettersUnavailable(name, err)
		}
		if q.Limit > 0 && len(out.Objects) == q.Limit {
			out.More, out.Unlisted = true, w.total-q.Limit
			last := out.Objects[len(out.Objects)-1]
			out.Next, out.After = last.LastModified, last.Key
			break
		}
		out.Objects = append(out.Objects, o)
	}
	return out, nil
}

// deadLettersUnavailable wraps a failure to list a subscription's dead letters.
func deadLettersUnavailable(name string, err error) error {
	return fmt.Errorf("listing the dead letters of %q: %w: %w", name, ErrDeadLetterStoreUnavailable, err)
}

// DeadLetterRecords reads a subscription's dead-letter records selected by q, with their
// events in the topic's input schema, from the topic's objects ([Router.DeadLetterObjects]; an
// object a server listed without metadata is checked again by the metadata it is read with).
// It reads the objects one at a time, oldest first, as it walks the listing; with q.Limit set
// it stops once the answer is full and says what it left in [DeadLetterRead.More]. Objects that
// cannot be read or are not JSON arrays are reported in [DeadLetterRead.Problems] and skipped,
// and so is each record that cannot be decoded (not the rest of its object); so is an object
// larger than egrid writes one (deadletter.Config.ReadLimit), which is not read at all.
func (r *Router) DeadLetterRecords(ctx context.Context, topic, name string, q DeadLetterQuery) (*DeadLetterRead, error) {
	t, spec, prefix, err := r.deadLetterSource(topic, name)
	if err != nil {
		return nil, err
	}
	if err := q.Check(); err != nil {
		return nil, err
	}
	bucket := spec.DeadLetterDestination.Properties.BlobContainerName
	w, err := r.walkDeadLetters(ctx, t.name, bucket, prefix, q, false)
	if err != nil {
		return nil, deadLettersUnavailable(name, err)
	}
	out := &DeadLetterRead{}
	held := 0 // bytes of the events in out.Entries
	full := func(next int) bool {
		return q.Limit > 0 && (len(out.Entries) >= q.Limit || (len(out.Entries) > 0 && held+next > MaxDeadLetterReadBytes))
	}
	walked := 0
	// The continuation: the objects written at since with keys up to after are gone past, and
	// count records selected after them. since is the time of the object being read, so a
	// query with Since alone takes up from it, as before After and Offset were answered.
	skip, since, after, count := q.Offset, q.Since, q.After, 0
	more := func(o sinks.ObjectInfo) {
		if !o.LastModified.Equal(since) {
			since, after, count = o.LastModified, "", 0
		}
		out.More, out.Next, out.After, out.Offset = true, since, after, count
	}
	for o, err := range w.all(ctx) {
		if err != nil {
			return nil, deadLettersUnavailable(name, err)
		}
		if q.Limit > 0 && len(out.Entries) >= q.Limit {
			more(o)
			out.Unread = max(w.total-walked, 1)
			break
		}
		walked++
		if !o.LastModified.Equal(since) {
			since, after, count = o.LastModified, "", 0
		}
		obj, err := r.readDeadLetterObject(ctx, t, bucket, o.Key)
		if err != nil {
			return nil, fmt.Errorf("reading the dead letters of %q: %w", name, err)
		}
		if obj.ours {
			out.Objects++
		}
		for _, p := range obj.problems {
			listProblem(&out.Problems, &out.UnlistedProblems, p)
		}
		for _, rec := range obj.recs {
			if q.Reason != "" && rec.Reason != q.Reason {
				continue
			}
			if skip > 0 {
				skip--
				count++
				continue
			}
			size := 0
			if rec.Event != nil {
				size = rec.Event.Size()
			}
			if out.More || full(size) {
				if !out.More {
					more(o)
				}
				out.Left++
				continue
			}
			count++
			held += size
			out.Entries = append(out.Entries, DeadLetterEntry{Object: o.Key, Written: o.LastModified, DeadLetterRecord: rec})
		}
		if out.More {
			out.Unread = max(w.total-walked, 0)
			break
		}
	}
	return out, nil
}

// deadLetterObject is one dead-letter object read back by [Router.readDeadLetterObject].
type deadLetterObject struct {
	info sinks.ObjectInfo
	recs []schemas.DeadLetterRecord
	// ours: the object was read and is the topic's (one listed without its metadata may turn
	// out to be another topic's, and is then left out without a problem).
	ours bool
	// problems say why the object could not be read or decoded (recs is then empty), or
	// which of its records could not be decoded (left out of recs), for
	// [DeadLetterRead.Problems].
	problems []string
	// unavailable is the store's error when it failed the read (not an object gone or too
	// large): a replay tries again, then reads no further objects.
	unavailable error
}

// readDeadLetterObject reads the dead-letter object under key in bucket and decodes it as
// records of topic t. It refuses an object larger than egrid writes one (the store's Get
// reads no more than the limit). The error is set only when ctx ended; the object's own
// problems are in the result.
func (r *Router) readDeadLetterObject(ctx context.Context, t *topicRuntime, bucket, key string) (deadLetterObject, error) {
	limit := r.dead.actorCfg.ReadLimit()
	body, info, err := r.dead.store.Get(ctx, bucket, key, limit)
	if err != nil {
		if ctx.Err() != nil {
			return deadLetterObject{}, ctx.Err()
		}
		if errors.Is(err, sinks.ErrObjectTooLarge) {
			return deadLetterObject{problems: []string{fmt.Sprintf("%s: not read: the object is larger than the %d MiB egrid reads back, and egrid writes none that large; "+
				"read it with an S3 client (e.g. mc cat <alias>/%s/%s), or split it into JSON arrays of fewer records (%v)", key, limit>>20, bucket, key, err)}}, nil
		}
		obj := deadLetterObject{problems: []string{fmt.Sprintf("%s: %v", key, err)}}
		if !errors.Is(err, sinks.ErrObjectNotFound) && !errors.Is(err, sinks.ErrBucketNotFound) {
			obj.unavailable = err
		}
		return obj, nil
	}
	if !deadletter.BelongsTo(info, t.name) {
		return deadLetterObject{info: info}, nil // another topic's, listed without its metadata
	}
	// Record by record: one that cannot be decoded is reported and left out, not its object.
	recs, bad, err := schemas.DecodeDeadLetterRecords(body, t.load().schema, t.id)
	if err != nil {
		return deadLetterObject{info: info, ours: true, problems: []string{fmt.Sprintf("%s: %v; its records are left out: egrid did not write it so, or it was changed since; "+
			"fix it, or move it out of the subscription's prefix", key, err)}}, nil
	}
	obj := deadLetterObject{info: info, recs: recs, ours: true}
	for _, e := range bad {
		obj.problems = append(obj.problems, fmt.Sprintf("%s: record %d: %s; that record is left out (the object's others are read): egrid did not write it so, or it was changed since; "+
			"fix it, or remove it from the object", key, e.Index, strings.ReplaceAll(e.Reason, "\n", "; ")))
	}
	return obj, nil
}

// MaxListedProblems is how many problems a [DeadLetterRead] or [ReplaySummary] lists: a range
// of many objects egrid cannot read (not egrid's, or a store refusing every read) answers with
// a bounded list, and counts the others.
const MaxListedProblems = 100

// maxListedProblems is MaxListedProblems; tests set it lower.
var maxListedProblems = MaxListedProblems

// listProblem appends problem to list while it holds fewer than MaxListedProblems, and counts
// it in unlisted otherwise.
func listProblem(list *[]string, unlisted *int, problem string) {
	if len(*list) < maxListedProblems {
		*list = append(*list, problem)
	} else {
		*unlisted++
	}
}

// ErrBadDeadLetterQuery is the error of a [DeadLetterQuery] that selects nothing a store
// could answer: a key that is no object key, or Since after Until.
var ErrBadDeadLetterQuery = errors.New("bad dead-letter query")

// Check reports what is wrong with q, wrapping ErrBadDeadLetterQuery. A key that is no object
// key ("BILLING/../X": an empty, "." or ".." segment, a / at either end, not UTF-8, over
// 1,024 bytes) is refused here: the store refuses to list or read it, which read as the store
// being unavailable.
func (q DeadLetterQuery) Check() error {
	var errs []error
	if q.Key != "" {
		if why := objectKeyProblem(q.Key); why != "" {
			errs = append(errs, fmt.Errorf("key %q: %s; give a key as egrid deadletter list (or a BlobCreated notification) names it, "+
				"such as BILLING/2026/1/2/15/<uuid>.json", clip.String(q.Key), why))
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Since.After(q.Until) {
		errs = append(errs, fmt.Errorf("since %s is after until %s, which selects nothing: give the earlier time as since",
			q.Since.UTC().Format(time.RFC3339Nano), q.Until.UTC().Format(time.RFC3339Nano)))
	}
	if q.Offset < 0 {
		errs = append(errs, fmt.Errorf("offset %d: use 0 or more", q.Offset))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrBadDeadLetterQuery, err)
	}
	return nil
}

// objectKeyProblem says what makes key no object key a store lists or reads ("": none).
func objectKeyProblem(key string) string {
	switch {
	case len(key) > 1024:
		return fmt.Sprintf("it has %d bytes, more than the 1,024 of an object key", len(key))
	case !utf8.ValidString(key):
		return "it is not UTF-8"
	case strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/"):
		return "it begins or ends with /"
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return "it has an empty path segment (//)"
		case ".", "..":
			return fmt.Sprintf("it has a %q path segment", seg)
		}
	}
	return ""
}

// ErrDeadLetterStoreUnavailable wraps a failure to read the dead-letter store.
var ErrDeadLetterStoreUnavailable = errors.New("dead-letter store unavailable")

// ErrDeadLetterCredentialsRefused is wrapped, with [ErrDeadLetterStoreUnavailable], when the
// dead-letter store refused the router's credentials (it is sinks.ErrCredentialsRefused).
var ErrDeadLetterCredentialsRefused = sinks.ErrCredentialsRefused

// MinIOCredentialsHint says what to check when MinIO refuses the router's credentials
// (sinks.ErrCredentialsRefused): the readiness check, the admin API and egrid serve's start
// say it instead of calling MinIO unreachable.
const MinIOCredentialsHint = "MinIO refused egrid's credentials: check --minio-access-key and --minio-secret-key " +
	"(or --minio-secret-key-file; server.minio in a config file), then restart egrid serve"
