package actors

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// A push subscription actor's window: the events it takes in from its topic, handed over in
// memory or read from the journal once it is behind, as far as the window has room; and its
// parked events as they come due, their bodies read from the store when they were loaded
// without them.

// fetch is the reading of parked events' bodies (see [subscription.fetchDue]).
type fetch struct {
	due     []*item // came due; waiting for their read
	id      uint64  // of the read in flight, 0 when none
	fetched []*item // the events it reads
}

// fetchDue reads the events of parked events that came due without them, off the mailbox and
// at most maxReadEntries at a time, while the ready queue is short; they come back as a
// [parkedRead].
func (s *subscription) fetchDue() {
	f := s.fetch
	if f == nil || f.id != 0 || len(f.due) == 0 || len(s.ready) >= maxReadEntries {
		return
	}
	n := min(len(f.due), maxReadEntries)
	f.fetched = append(f.fetched[:0], f.due[:n]...)
	clear(f.due[:n])
	f.due = f.due[n:]
	seqs := make([]uint64, n)
	for i, it := range f.fetched {
		seqs[i] = it.seq
	}
	id := readIDs.Add(1)
	f.id = id
	st, topic, name := s.cfg.Store, s.cfg.Topic, s.cfg.Name
	root, self, ctx := s.system.Root, s.self, s.context()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		parked, err := st.ParkedEvents(ctx, topic, name, seqs)
		root.Send(self, &parkedRead{id: id, parked: parked, err: err})
	}()
}

// applyParked gives the events read by fetchDue their bodies and moves them on as promoteDue
// does: to the ready queue, or ended when their time to live has passed.
func (s *subscription) applyParked(r *parkedRead) {
	f := s.fetch
	if f == nil || r.id != f.id {
		return // from before a restart
	}
	f.id = 0
	if r.err != nil {
		panic(fmt.Errorf("reading parked events of subscription %s: %w", s.scope, r.err))
	}
	byseq := make(map[uint64]*schemas.Event, len(r.parked))
	for _, p := range r.parked {
		byseq[p.Seq] = p.Event
	}
	now := time.Now()
	for _, it := range f.fetched {
		ev, ok := byseq[it.seq]
		if !ok || ev == nil {
			// Only this actor deletes its parked events; a missing one is damage in the store.
			s.log.Error("a parked event is missing from the store; forgetting it", "seq", it.seq)
			s.settle(it)
			continue
		}
		it.ev = ev
		s.ready1(it, now)
	}
	clear(f.fetched)
	f.fetched = f.fetched[:0]
	if len(f.due) == 0 {
		s.fetch = nil
	}
}

// room is how many more events the subscription may take in. Events parked for a retry do not
// count against the window (thousands of events waiting hours for their next attempt must not
// stop new events), but at most maxParkedFactor windows of them are kept in memory: past that
// the rest waits in the journal until retries settle.
func (s *subscription) room() int {
	active := len(s.items) - s.waiting.Len()
	return min(s.window()-active, maxParkedFactor*s.window()-len(s.items))
}

// maxParkedFactor bounds the parked events in memory, in windows.
const maxParkedFactor = 16

func (s *subscription) window() int {
	if s.cfg.Window > 0 {
		return s.cfg.Window
	}
	return DefaultWindow
}

// takeIn accepts the entries of a Deliver that the subscription has not seen yet, as far as the
// window allows.
func (s *subscription) takeIn(d *Deliver) {
	s.deliver(d, s.room, s.add)
}

// fill starts a journal read while the subscription is behind and the window has room. The
// read runs off the mailbox (a disk store may wait behind a publish's fsync); its entries come
// back as a [journalRead]. One read at a time, always from next: nothing moves next while the
// subscription is behind, so no entry is read twice.
func (s *subscription) fill() {
	s.fetchDue()
	if !s.readable() {
		return
	}
	room := s.room()
	if room <= 0 || room < s.minRead() && len(s.ready) > readReserve*s.maxInFlight()*s.maxEvents {
		return
	}
	s.read(s.context(), s.cfg.Store, s.cfg.Topic, min(room, maxReadEntries), &s.wg, s.system.Root, s.self)
}

// maxReadEntries bounds one catch-up read.
const maxReadEntries = 1024

// readReserve is how many rounds of its attempts in flight a subscription keeps ready before
// it reads the journal again for less than [subscription.minRead] entries.
const readReserve = 4

// minRead is the fewest entries a catch-up read asks for while the ready queue still holds
// [readReserve] rounds of attempts. A read costs a journal seek however few entries it
// returns: a subscription whose window is full frees a slot at a time, and reading each
// time one frees (an entry or two per seek, batching off) made the reads a tenth of the
// router's CPU per delivered event.
func (s *subscription) minRead() int {
	return max(1, min(maxReadEntries/4, s.window()/4))
}

// applyRead takes in the entries of the journal read in flight.
func (s *subscription) applyRead(r *journalRead) {
	s.readDone(r, s.cfg.Topic, feedFilter{s.cfg.Filter, s.cfg.Metrics, s.scope}, s.add)
}

func (s *subscription) add(e store.Entry) {
	if _, ok := s.items[e.Seq]; ok {
		return // parked before a restart
	}
	it := &item{seq: e.Seq, publish: e.PublishTime, ev: e.Event, state: stateReady}
	if s.items == nil {
		s.items = make(map[uint64]*item)
	}
	s.items[e.Seq] = it
	s.order = append(s.order, e.Seq)
	s.ready = append(s.ready, it)
}

// promoteDue moves parked events whose time has come to the ready queue. An event whose time to
// live has passed ends here, at its due time and without an attempt (SPEC §2.1: the TTL is
// checked only when the next attempt comes due, so an event can end later than its TTL, never
// sooner).
func (s *subscription) promoteDue(now time.Time) {
	for s.waiting.Len() > 0 && !s.waiting[0].due.After(now) {
		it := heap.Pop(&s.waiting).(*item)
		if it.ev == nil { // loaded without its event: read it first (fetchDue)
			it.state = stateFetching
			if s.fetch == nil {
				s.fetch = new(fetch)
			}
			s.fetch.due = append(s.fetch.due, it)
			continue
		}
		s.ready1(it, now)
	}
}

// ready1 moves one due event to the ready queue, or ends it when its time to live has passed.
func (s *subscription) ready1(it *item, now time.Time) {
	it.state = stateReady
	if dec, expired := s.cfg.Policy.AtDue(it.publish, now); expired {
		s.endUnattempted(it, dec, 0, now)
		return
	}
	s.ready = append(s.ready, it)
}
