package router

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/sinks"
)

// Walking a subscription's dead-letter objects in the order they were written, without
// holding the listing.
//
// An object store lists in key order, a page at a time, and dead-letter keys are not in time
// order ("<prefix>/<YYYY>/<M>/<D>/<H>/<uuid>.json", not zero-padded, a random uuid). But every
// key of one hour begins with the hour's prefix, so an hour's objects are listed together. A
// walk first lists the prefix once (with Since, only the keys named from WriteLag before it
// on: [keysFrom]), keeping of each hour only the first and last time an
// object of it selected was written (some 100 bytes an hour, however many objects); then it
// lists the hours one at a time, in the order of those times, and answers each object once no
// hour still to be listed can hold an object written before it. It holds one page of the
// listing, the objects of the hour being answered and those written long after their key's
// hour, not yet due: not the whole listing. Objects under the prefix outside the key layout
// (not written by egrid), and those written outside their key's hour (a write retried for
// long), are held from the first listing on.

// keysFrom returns the listings of the keys under base that [deadletter.Key] names for times
// from from's hour on. The keys do not sort by time (months, days and hours are not
// zero-padded: ".../2024/10/" sorts before ".../2024/9/"), but years do (four digits), and each
// month, day and hour has a prefix of its own: so the hours left of from's day, the days left
// of its month and the months left of its year, one prefix each, then every key after the
// year's (S3's start-after). At most 66 listings, however many keys sort before. Keys under
// base not named as egrid names them are listed only when they sort after from's year's.
func keysFrom(base string, from time.Time) []sinks.ListQuery {
	from = from.UTC()
	y, m, d, h := from.Year(), int(from.Month()), from.Day(), from.Hour()
	var out []sinks.ListQuery
	for ; h < 24; h++ {
		out = append(out, sinks.ListQuery{Prefix: fmt.Sprintf("%s/%d/%d/%d/%d/", base, y, m, d, h)})
	}
	for d++; d <= 31; d++ {
		out = append(out, sinks.ListQuery{Prefix: fmt.Sprintf("%s/%d/%d/%d/", base, y, m, d)})
	}
	for m++; m <= 12; m++ {
		out = append(out, sinks.ListQuery{Prefix: fmt.Sprintf("%s/%d/%d/", base, y, m)})
	}
	// '~' sorts after the digits and '/': every key of year y sorts before it.
	return append(out, sinks.ListQuery{Prefix: base + "/", StartAfter: fmt.Sprintf("%s/%d/~", base, y)})
}

// listEach yields the objects of each listing in turn ([sinks.ListAll]); an error ends it.
func listEach(ctx context.Context, st sinks.ObjectStore, bucket string, lists []sinks.ListQuery) iter.Seq2[sinks.ObjectInfo, error] {
	return func(yield func(sinks.ObjectInfo, error) bool) {
		for _, q := range lists {
			for o, err := range sinks.ListAll(ctx, st, bucket, q) {
				if !yield(o, err) || err != nil {
					return
				}
			}
		}
	}
}

// dlGroup is an hour of dead-letter keys a walk lists: the objects whose keys begin with
// prefix were written in [min, max].
type dlGroup struct {
	prefix   string
	min, max time.Time
}

// dlWalk walks the dead-letter objects of one subscription that a query selects.
type dlWalk struct {
	store  sinks.ObjectStore
	bucket string
	base   string // the key prefix, without its "/"
	topic  string
	q      DeadLetterQuery
	// desc walks newest first (objects written at one instant in key order either way).
	desc bool
	// listed: the groups' times are those of the objects the first listing found (not
	// bounds of the key layout), and the walk answers only objects within them.
	listed bool

	groups []dlGroup
	// loose are the selected objects outside the key layout, or written outside their key's
	// hour ([onTime]): the walk holds them throughout.
	loose []sinks.ObjectInfo
	// total counts the objects selected by the first listing.
	total int
	// done, when set, is called as each walk ([dlWalk.all]) ends with the most objects it
	// held at once waiting to be answered, and total (tests).
	done func(held, total int)
}

// selected says whether o is one of the walk's objects: the query's key, the topic's, written
// in [Since, Until), and after the query's continuation.
func (w *dlWalk) selected(o sinks.ObjectInfo) bool {
	q := w.q
	if (q.Key != "" && o.Key != q.Key) || !deadletter.BelongsTo(o, w.topic) {
		return false
	}
	if (!q.Since.IsZero() && o.LastModified.Before(q.Since)) || (!q.Until.IsZero() && !o.LastModified.Before(q.Until)) {
		return false
	}
	return q.After == "" || !o.LastModified.Equal(q.Since) || o.Key > q.After
}

// walkDeadLetters lists the objects under prefix (ending in "/") in bucket that q selects,
// once, and returns the walk through them: oldest first, or newest first with desc. The
// bucket not existing is no objects.
func (r *Router) walkDeadLetters(ctx context.Context, topic, bucket, prefix string, q DeadLetterQuery, desc bool) (*dlWalk, error) {
	base := strings.TrimSuffix(prefix, "/")
	w := &dlWalk{store: r.dead.store, bucket: bucket, base: base, topic: topic, q: q, desc: desc, listed: true, done: r.dead.walked}
	lists := []sinks.ListQuery{{Prefix: prefix}}
	switch {
	case q.Key != "":
		if !strings.HasPrefix(q.Key, prefix) {
			return w, nil
		}
		lists = []sinks.ListQuery{{Prefix: q.Key}}
	case !q.Since.IsZero():
		// An object written from Since on is named at most WriteLag (and the store's clock
		// skew) earlier.
		lists = keysFrom(base, q.Since.Add(-r.dead.actorCfg.WriteLag()-deadLetterClockSkew))
	}
	for o, err := range listEach(ctx, w.store, bucket, lists) {
		if errors.Is(err, sinks.ErrBucketNotFound) {
			return w, nil // nothing dead-lettered yet
		}
		if err != nil {
			return nil, err
		}
		if !w.selected(o) {
			continue
		}
		w.total++
		hour, start, ok := deadletter.KeyHour(base, o.Key)
		if !ok || !onTime(start, o.LastModified) {
			w.loose = append(w.loose, o)
			continue
		}
		// The keys of one hour are listed together (they share its prefix).
		if n := len(w.groups); n > 0 && w.groups[n-1].prefix == hour {
			g := &w.groups[n-1]
			g.min, g.max = minTime(g.min, o.LastModified), maxTime(g.max, o.LastModified)
			continue
		}
		w.groups = append(w.groups, dlGroup{prefix: hour, min: o.LastModified, max: o.LastModified})
	}
	if desc {
		slices.SortStableFunc(w.groups, func(a, b dlGroup) int { return b.max.Compare(a.max) })
	} else {
		slices.SortStableFunc(w.groups, func(a, b dlGroup) int { return a.min.Compare(b.min) })
	}
	return w, nil
}

// all yields the walk's objects in order, listing the hours again each time it is called (a
// replay walks twice, and a replay abandoned by its actor may still walk as the next one
// does: a walk keeps its state to itself). An error of the store ends it.
func (w *dlWalk) all(ctx context.Context) iter.Seq2[sinks.ObjectInfo, error] {
	return func(yield func(sinks.ObjectInfo, error) bool) {
		h := &dlHeap{desc: w.desc}
		held := 0 // the most objects held at once
		if w.done != nil {
			defer func() { w.done(held, w.total) }()
		}
		for _, o := range w.loose { // kept: a replay walks again
			heap.Push(h, o)
		}
		held = h.Len()
		for i, g := range w.groups {
			for o, err := range sinks.ListAll(ctx, w.store, w.bucket, sinks.ListQuery{Prefix: g.prefix}) {
				if errors.Is(err, sinks.ErrBucketNotFound) {
					break
				}
				if err != nil {
					yield(sinks.ObjectInfo{}, err)
					return
				}
				if !w.selected(o) {
					continue
				}
				// Only what the first listing saw of the hour: the order rests on its times.
				if w.listed {
					_, start, _ := deadletter.KeyHour(w.base, o.Key)
					if !onTime(start, o.LastModified) || o.LastModified.Before(g.min) || o.LastModified.After(g.max) {
						continue
					}
				}
				heap.Push(h, o)
			}
			held = max(held, h.Len())
			for h.Len() > 0 && (i+1 == len(w.groups) || w.due(h.objs[0], w.groups[i+1])) {
				if !yield(heap.Pop(h).(sinks.ObjectInfo), nil) {
					return
				}
			}
		}
		held = max(held, h.Len())
		for h.Len() > 0 {
			if !yield(heap.Pop(h).(sinks.ObjectInfo), nil) {
				return
			}
		}
	}
}

// due says whether o comes before every object of next and of the groups after it.
func (w *dlWalk) due(o sinks.ObjectInfo, next dlGroup) bool {
	bound := next.min
	if w.desc {
		if o.LastModified.After(next.max) {
			return true
		}
		bound = next.max
	} else if o.LastModified.Before(next.min) {
		return true
	}
	// Written at the bound: next's keys, all after its prefix, come after o's when o's is
	// before that prefix.
	return o.LastModified.Equal(bound) && o.Key < next.prefix
}

// dlHeap orders objects by the time they were written (oldest first, or newest with desc),
// then by key.
type dlHeap struct {
	desc bool
	objs []sinks.ObjectInfo
}

func (h *dlHeap) Len() int { return len(h.objs) }
func (h *dlHeap) Less(i, j int) bool {
	a, b := h.objs[i], h.objs[j]
	if c := a.LastModified.Compare(b.LastModified); c != 0 {
		return (c < 0) != h.desc
	}
	return a.Key < b.Key
}
func (h *dlHeap) Swap(i, j int) { h.objs[i], h.objs[j] = h.objs[j], h.objs[i] }
func (h *dlHeap) Push(x any)    { h.objs = append(h.objs, x.(sinks.ObjectInfo)) }
func (h *dlHeap) Pop() any {
	o := h.objs[len(h.objs)-1]
	h.objs[len(h.objs)-1] = sinks.ObjectInfo{}
	h.objs = h.objs[:len(h.objs)-1]
	return o
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// onTime says whether an object named in the hour starting at start, written at written, was
// written in that hour (give or take [deadLetterClockSkew]), as egrid's objects are unless
// their write was retried for long.
func onTime(start, written time.Time) bool {
	return !written.Before(start.Add(-deadLetterClockSkew)) && written.Before(start.Add(time.Hour+deadLetterClockSkew))
}

// deadLetterClockSkew is how much earlier than its key's hour an object may be written: the
// object store's clock may be behind egrid's, by at most 15 minutes (S3 and MinIO refuse a
// request signed further off).
const deadLetterClockSkew = 15 * time.Minute

// walkDeadLettersFrom returns a walk, oldest first, of the objects under prefix in bucket
// written from since on, listing only the hours of keys from since's on (up to now): egrid
// names an object by the time it first tries to write it, so an object written after since
// holding records that ended after since is under such a key. It does not list the prefix
// first, and counts no total; objects outside the key layout, or written long after their
// key's hour by a store whose clock was set back, are not looked at.
func (r *Router) walkDeadLettersFrom(topic, bucket, prefix string, since, now time.Time) *dlWalk {
	w := &dlWalk{store: r.dead.store, bucket: bucket, topic: topic, q: DeadLetterQuery{Since: since}, done: r.dead.walked}
	base := strings.TrimSuffix(prefix, "/")
	end := now.Add(deadLetterClockSkew)
	for h := since.Add(-deadLetterClockSkew).UTC().Truncate(time.Hour); !h.After(end); h = h.Add(time.Hour) {
		w.groups = append(w.groups, dlGroup{prefix: deadletter.HourPrefix(base, h), min: h.Add(-deadLetterClockSkew), max: farFuture})
	}
	return w
}

// farFuture is a time after every object's.
var farFuture = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
