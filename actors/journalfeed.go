package actors

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
)

// journalFeed is where a subscription or queue actor stands in its topic's journal, and the
// rules by which it takes in entries: handed over in memory ([Deliver]) while it keeps up,
// read from the journal off the mailbox ([journalRead]) once it has fallen behind, one read
// at a time and always from next, so no entry is taken in twice or skipped. Both actors embed
// it; its fields are theirs alone.
type journalFeed struct {
	next   uint64 // next journal sequence number to take in
	head   uint64 // highest journal sequence number known to exist
	behind bool   // entries in [next, head] are in the journal, not in memory
	// stalled is set when a journal read from next came back empty although the journal
	// reaches head (a lagging replica answered): no read starts until the next Deliver.
	stalled bool
	// reading is the id of the journal read in flight (0 when none): at most one runs at a
	// time, from next, so no range is read twice.
	reading uint64
}

// loadedAt places the feed after the stored cursor, the journal known to reach head.
func (f *journalFeed) loadedAt(cursor, head uint64) {
	f.next, f.head = cursor+1, max(head, f.head)
	f.behind = f.next <= f.head
}

// announce notes that the journal reaches through, announced by Delivers whose entries were
// not kept (while the state loaded): they are read from the journal.
func (f *journalFeed) announce(through uint64) {
	if through > f.head {
		f.head = through
		f.behind = f.next <= f.head
	}
}

// unread counts the entries known to be in the journal and not taken in yet.
func (f *journalFeed) unread() int {
	if f.behind && f.head >= f.next {
		return int(f.head - f.next + 1)
	}
	return 0
}

// deliver takes in the entries of d not seen yet, handing each to add while room is
// positive; past that, or when d starts after next (appended on another cluster node, or
// past the hand-off bound), the feed falls behind and the rest is read from the journal.
// Filtering is the caller's: the topic actor hands over only what the filter matched.
func (f *journalFeed) deliver(d *Deliver, room func() int, add func(store.Entry)) {
	f.stalled = false
	if d.Through > f.head {
		f.head = d.Through
	}
	if f.behind || d.Through < f.next {
		return
	}
	if d.From > f.next {
		f.behind = true // entries before From were not handed over: read them
		return
	}
	for _, e := range d.Entries {
		if e.Seq < f.next {
			continue
		}
		if room() <= 0 {
			f.next, f.behind = e.Seq, true
			return
		}
		add(e)
	}
	f.next = d.Through + 1
}

// readable reports whether a journal read may start: the feed is behind, no read is in
// flight, and the last read did not come back empty.
func (f *journalFeed) readable() bool {
	return f.behind && f.reading == 0 && !f.stalled
}

// readIDs numbers journal reads across incarnations, so a restarted actor ignores the result
// of a read its predecessor started.
var readIDs atomic.Uint64

// read starts a read of up to limit entries from next, off the mailbox (a disk store may
// wait behind a publish's fsync), under wg; its entries come back to self as a [journalRead].
func (f *journalFeed) read(ctx context.Context, st store.Store, topic string, limit int, wg *sync.WaitGroup, root *actor.RootContext, self *actor.PID) {
	id := readIDs.Add(1)
	f.reading = id
	from := f.next
	wg.Add(1)
	go func() {
		defer wg.Done()
		entries, err := st.Read(ctx, topic, from, limit)
		root.Send(self, &journalRead{id: id, from: from, entries: entries, err: err})
	}()
}

// feedFilter is what a read's entries are matched with: the subscription's filter, and where
// its advanced filters' evaluations are counted.
type feedFilter struct {
	filter  *filter.Filter
	metrics *metrics.Set
	scope   string
}

// readDone takes in the entries of the read in flight that f's filter matches, handing each
// to add, and reports false for the result of another read (one an earlier incarnation
// started). A failed read panics: the actor restarts and reads again. An entry without an
// event is a journal position the store passed over (see store.Entry): next moves past it.
func (f *journalFeed) readDone(r *journalRead, topic string, m feedFilter, add func(store.Entry)) bool {
	if r.id != f.reading {
		return false
	}
	f.reading = 0
	if r.err != nil {
		panic(fmt.Errorf("reading journal of topic %s from %d: %w", topic, r.from, r.err))
	}
	if m.filter.Advanced() > 0 && len(r.entries) > 0 {
		m.metrics.Add(metrics.Key{Name: metrics.AdvancedFilterEvaluationCount, Scope: m.scope}, int64(len(r.entries)))
	}
	for _, e := range r.entries {
		if e.Seq < f.next {
			continue
		}
		if e.Event != nil && (m.filter == nil || m.filter.Match(e.Event)) {
			add(e)
		}
		f.next = e.Seq + 1
	}
	if f.next > f.head {
		f.behind = false
		return true
	}
	if len(r.entries) == 0 {
		// The journal is known to reach head, but the read found nothing from next: in
		// cluster mode the replica that answered may not have the newest entries yet. Never
		// skip them (nobody would receive them): stay behind and read again at the next
		// message that announces the journal (a Deliver: an append here, another node's
		// notice, the periodic poll of the journal's end). A read starts from the journal's
		// first entry, so a trimmed journal does not end here.
		f.stalled = true
	}
	return true
}
