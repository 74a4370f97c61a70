package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// maxPipeline bounds the events one writer takes into a pipeline from several Appends (one
// Append is never split, however large).
const maxPipeline = 4096

// appendReq is one Append waiting for its topic's writer.
type appendReq struct {
	ctx  context.Context
	msgs [][]byte // encoded entries, in order
	done chan appendResult
}

type appendResult struct {
	last uint64
	err  error
}

// writer is the one goroutine of this store that publishes to a topic's journal stream. It
// keeps the stream's last sequence number and publishes every event with the header
// Nats-Expected-Last-Sequence set to the number before it, so the events of one Append get
// consecutive numbers and a publish that would land after someone else's is refused
// (store.ErrFenced) instead of interleaving. Concurrent Appends are published together as one
// pipeline (one round of acknowledgements), as the disk store shares one fsync.
type writer struct {
	s       *Store
	topic   string
	stream  string
	subject string
	reqs    chan *appendReq // unbuffered: a request taken is always answered
	quit    chan struct{}
	exited  chan struct{}
	quitErr error  // what requests get after quit; set before quit is closed
	id      string // unique per writer: the prefix of its message IDs
	msgs    uint64 // messages published, for the next message ID
}

func (s *Store) writer(topic string) (*writer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, store.ErrClosed
	}
	if w, ok := s.writers[topic]; ok {
		return w, nil
	}
	w := &writer{
		s: s, topic: topic, stream: s.streamName(topic), subject: s.subject(topic),
		reqs: make(chan *appendReq), quit: make(chan struct{}), exited: make(chan struct{}),
		id: newWriterID(),
	}
	s.writers[topic] = w
	go w.run()
	return w, nil
}

// stop ends the writer and waits for it; requests not yet taken fail with err.
func (w *writer) stop(err error) {
	w.quitErr = err
	close(w.quit)
	<-w.exited
}

func (w *writer) run() {
	defer close(w.exited)
	var (
		last   uint64 // the stream's last sequence number, when synced
		synced bool
		batch  []*appendReq
	)
	for {
		batch = batch[:0]
		select {
		case r := <-w.reqs:
			batch = append(batch, r)
		case <-w.quit:
			return
		}
		n := len(batch[0].msgs)
	drain:
		for n < maxPipeline {
			select {
			case r := <-w.reqs:
				batch = append(batch, r)
				n += len(r.msgs)
			default:
				break drain
			}
		}
		// Another node appending to the journal moves its end: a pipeline whose first message
		// finds another last sequence number is refused whole (nothing of it is stored), so
		// it is published again after the new end, for as long as its requests' contexts
		// allow (each has a deadline: the caller's or the store's Timeout); a request given
		// up is answered with its context's error and left out of the next try.
		for try := 0; ; try++ {
			if !synced {
				seq, err := w.s.streamLastSeq(w.topic)
				if err != nil {
					for _, r := range batch {
						r.done <- appendResult{err: err}
					}
					break
				}
				last, synced = seq, true
			}
			var ok, again bool
			last, ok, again = w.publish(batch, last)
			synced = ok
			if !again {
				break
			}
			if try >= 2 {
				// Writers that keep refusing each other: a random pause lets one through. The
				// end the refusal named is stale after it (the others went on appending), so
				// it is read again; publishing after it would be refused for certain.
				time.Sleep(time.Duration(mrand.Int64N(int64(time.Millisecond) << min(try, 6))))
				synced = false
			}
		}
	}
}

// publish publishes the batch's events pipelined after last and answers every request. It
// returns the new last sequence number and whether it is still known (false after any
// failure: the next batch reads it from the stream again). A pipeline whose very first
// message was refused for another last sequence number (another writer appended: nothing of
// the pipeline is stored) is not answered, and again is true: publish it again. Requests
// whose context ended are answered with its error whatever happens.
func (w *writer) publish(batch []*appendReq, last uint64) (newLast uint64, ok, again bool) {
	type pending struct {
		r       *appendReq
		futures []jetstream.PubAckFuture
		err     error
	}
	ps := make([]pending, len(batch))
	var failed error
	next := last
	prevID := ""
	for i, r := range batch {
		ps[i].r = r
		if failed != nil {
			ps[i].err = failed
			continue
		}
		if err := r.ctx.Err(); err != nil {
			ps[i].err = err // given up before anything was sent: nothing of it is stored
			continue
		}
		for _, data := range r.msgs {
			// The first message of the pipeline expects the journal's last sequence number,
			// each next one the message ID of the one before: after a refused message the
			// rest of the pipeline is refused too, so what is stored is always a prefix.
			w.msgs++
			id := w.id + strconv.FormatUint(w.msgs, 36)
			expect := jetstream.WithExpectLastSequence(next)
			if prevID != "" {
				expect = jetstream.WithExpectLastMsgID(prevID)
			}
			prevID = id
			f, err := w.s.js.PublishMsgAsync(&nats.Msg{Subject: w.subject, Data: data}, jetstream.WithMsgID(id), expect)
			if err != nil {
				failed = fmt.Errorf("jetstream store: publishing to topic %q: %w", w.topic, err)
				ps[i].err = failed
				break
			}
			ps[i].futures = append(ps[i].futures, f)
			next++
		}
	}
	timer := time.NewTimer(w.s.opts.Timeout)
	defer timer.Stop()
	if failed == nil {
		// The pipeline's first message is the first of the first request still sent.
		i := 0
		for i < len(ps)-1 && len(ps[i].futures) == 0 {
			i++
		}
		if refused, end, known := w.refusedWhole(ps[i].futures, timer); refused {
			return end, known, true
		}
	}
	var first error // the first failed acknowledgement: the cause of the ones after it
	for i := range ps {
		p := &ps[i]
		var seq uint64 // the sequence number of p's last acknowledged event
		for _, f := range p.futures {
			var err error
			select {
			case ack := <-f.Ok():
				seq = ack.Sequence
				last = max(last, seq)
			case err = <-f.Err():
			case <-timer.C:
				err = errors.New("no acknowledgement from JetStream in time")
				timer.Reset(0) // the rest fail at once
			}
			if err != nil && p.err == nil {
				if first == nil {
					first = w.s.appendErr(w.topic, err)
				}
				p.err = first
			}
		}
		switch {
		case p.err != nil:
		case first != nil:
			// Acknowledged after an earlier failure: that one was stored after all. Report
			// this one as failed too (the contract allows a failed Append to be on disk).
			p.err = first
		}
		p.r.done <- appendResult{last: seq, err: p.err}
	}
	return last, first == nil && failed == nil, false
}

// refusedWhole waits for the first acknowledgement of a pipeline (fs, the futures of its
// first request) and reports whether it was refused for another last sequence number; then
// the rest of the pipeline, chained to it by message ID, is refused too and nothing of it
// is stored. Only then are the futures consumed; otherwise the first one's result is put
// back for the caller to read.
//
// A refusal names the journal's last sequence number; end is it and known is true when it
// could be read from the error (else the caller reads it from the stream).
func (w *writer) refusedWhole(fs []jetstream.PubAckFuture, timer *time.Timer) (refused bool, end uint64, known bool) {
	if len(fs) == 0 {
		return false, 0, false
	}
	select {
	case err := <-fs[0].Err():
		if isWrongLastSeq(err) {
			end, known = wrongLastSeqEnd(err)
			return true, end, known
		}
		fs[0] = failedFuture{fs[0], err}
		return false, 0, false
	case ack := <-fs[0].Ok():
		fs[0] = ackedFuture{fs[0], ack}
		return false, 0, false
	case <-timer.C:
		timer.Reset(0) // the caller's wait fails at once too
		return false, 0, false
	}
}

// wrongLastSeqEnd reads the stream's last sequence number from a refusal for another last
// sequence number ("wrong last sequence: 85").
func wrongLastSeqEnd(err error) (uint64, bool) {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return 0, false
	}
	_, num, ok := strings.Cut(api.Description, "wrong last sequence: ")
	if !ok {
		return 0, false
	}
	seq, perr := strconv.ParseUint(strings.TrimSpace(num), 10, 64)
	return seq, perr == nil
}

// ackedFuture and failedFuture replay a result already taken from a future's channel.
type ackedFuture struct {
	jetstream.PubAckFuture
	ack *jetstream.PubAck
}

func (f ackedFuture) Ok() <-chan *jetstream.PubAck {
	c := make(chan *jetstream.PubAck, 1)
	c <- f.ack
	return c
}

func (f ackedFuture) Err() <-chan error { return nil }

type failedFuture struct {
	jetstream.PubAckFuture
	err error
}

func (f failedFuture) Ok() <-chan *jetstream.PubAck { return nil }

func (f failedFuture) Err() <-chan error {
	c := make(chan error, 1)
	c <- f.err
	return c
}

// appendErr maps a failed publish to the store's errors.
func (s *Store) appendErr(topic string, err error) error {
	switch {
	case isWrongLastSeq(err) || isWrongLastMsgID(err):
		return fmt.Errorf("jetstream store: appending to topic %q: %w: the journal's last sequence number is not the one this store wrote (%v)", topic, store.ErrFenced, err)
	case isStreamNotFound(err):
		return topicNotFound(topic)
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		// No server took the publish: the journal's stream is electing a leader (a NATS
		// server was lost) or is gone. The writer reads the journal's end before its next
		// publish, which tells the two apart (a topic deleted: store.ErrNotFound).
		return fmt.Errorf("jetstream store: appending to topic %q: no JetStream server took the events (its journal is electing a leader after a NATS server was lost, or the topic was deleted); publish them again: %w", topic, err)
	case errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrConnectionClosed):
		return fmt.Errorf("jetstream store: appending to topic %q: %w (%v)", topic, ErrNotConnected, err)
	}
	return fmt.Errorf("jetstream store: appending to topic %q: %w", topic, err)
}

// errCodeWrongLastMsgID is JetStream's error code for a refused Nats-Expected-Last-Msg-Id
// (nats.go names only the sequence one).
const errCodeWrongLastMsgID jetstream.ErrorCode = 10070

func isWrongLastMsgID(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == errCodeWrongLastMsgID
}

// newWriterID returns a random prefix for a writer's message IDs, so no two writers (in this
// process or another) use the same ID.
func newWriterID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:]) + "."
}

// streamLastSeq reads the last sequence number of a topic's journal stream.
func (s *Store) streamLastSeq(topic string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	return s.lastSeq(ctx, topic)
}

func (s *Store) streamInfo(ctx context.Context, topic string) (jetstream.Stream, *jetstream.StreamInfo, error) {
	if err := checkName("topic", topic); err != nil {
		return nil, nil, err
	}
	str, err := s.js.Stream(ctx, s.streamName(topic))
	if err != nil {
		if isStreamNotFound(err) {
			return nil, nil, topicNotFound(topic)
		}
		return nil, nil, fmt.Errorf("jetstream store: reading the journal stream of topic %q: %w", topic, err)
	}
	return str, str.CachedInfo(), nil
}

func (s *Store) lastSeq(ctx context.Context, topic string) (uint64, error) {
	_, info, err := s.streamInfo(ctx, topic)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// Append implements [store.Store]. It returns once JetStream acknowledged every event (stored
// on a majority of the stream's replicas). The events are separate messages: JetStream 2.10
// has no atomic batch publish, so a failed Append may have stored some of its events, a
// prefix of them, which the contract allows (publishers retry, delivery is at least once).
func (s *Store) Append(ctx context.Context, topic string, publishTime time.Time, events []*schemas.Event) (uint64, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	if len(events) == 0 {
		return s.lastSeq(ctx, topic)
	}
	if err := checkName("topic", topic); err != nil {
		return 0, err
	}
	if i := slices.Index(events, nil); i >= 0 {
		return 0, fmt.Errorf("jetstream store: appending to topic %q: event %d is nil; every journal entry needs an event", topic, i)
	}
	r := &appendReq{ctx: ctx, msgs: make([][]byte, len(events)), done: make(chan appendResult, 1)}
	for i, ev := range events {
		r.msgs[i] = appendEntry(nil, publishTime, ev)
	}
	w, err := s.writer(topic)
	if err != nil {
		return 0, err
	}
	select {
	case w.reqs <- r:
	case <-w.quit:
		return 0, w.quitErr
	case <-ctx.Done():
		return 0, fmt.Errorf("jetstream store: appending to topic %q: %w", topic, ctx.Err())
	}
	select {
	case res := <-r.done:
		return res.last, res.err
	case <-ctx.Done():
		return 0, fmt.Errorf("jetstream store: appending to topic %q: %w (the events may still be stored)", topic, ctx.Err())
	}
}

// LastSeq implements [store.Store]: the journal stream's last sequence number.
func (s *Store) LastSeq(ctx context.Context, topic string) (uint64, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer cancel()
	return s.lastSeq(ctx, topic)
}

// readWait bounds the wait for entries a Read's consumer counted but cannot deliver (trimmed
// meanwhile).
const readWait = 2 * time.Second

// smallRead is the largest Read served by single-message gets; larger ones use a short-lived
// consumer, which costs two more round trips but fetches in one.
const smallRead = 4

// Read implements [store.Store]. What it returns is a contiguous run of the stream from from
// (or from the first entry, when the entries before it are trimmed): a subscription actor
// moves its next entry past each one it gets, so a hole would skip an event for good. It may
// include events of an Append still waiting for its acknowledgement (they are stored, and
// delivery is at least once). With replicas it may also return fewer entries than the journal
// holds, none even: a replica that answers may not have the newest yet. Callers read again
// later; they never take a short read for the journal's end. A message on the journal's
// subject that does not decode is not an event the store wrote: the run returns its position
// as an entry without an event ([store.Entry]), logged once as an ERROR to [Options.Logger]
// (see decodeJournal).
func (s *Store) Read(ctx context.Context, topic string, from uint64, max int) ([]store.Entry, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	str, info, err := s.streamInfo(ctx, topic)
	if err != nil {
		return nil, err
	}
	st := info.State
	from = maxU(from, st.FirstSeq, 1)
	if max <= 0 || st.Msgs == 0 || from > st.LastSeq {
		return nil, nil
	}
	n := int(min(uint64(max), st.LastSeq-from+1))
	entries := make([]store.Entry, 0, n)
	if n <= smallRead {
		for seq := from; seq < from+uint64(n); seq++ {
			m, err := str.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				// Trimmed or deleted meanwhile: passed over. Otherwise not yet on the server
				// that answered (a direct get, which any replica answers, from a follower
				// behind the acknowledged end; a leader elected a moment ago): stop here, so
				// that what is returned stays a contiguous run from from and the caller
				// reads the rest again later.
				if g, gerr := gone(ctx, str, seq); gerr != nil {
					return nil, fmt.Errorf("jetstream store: reading topic %q at %d: %w", topic, seq, gerr)
				} else if g {
					continue
				}
				break
			}
			if err != nil {
				return nil, fmt.Errorf("jetstream store: reading topic %q at %d: %w", topic, seq, err)
			}
			e, err := s.decodeJournal(topic, seq, m.Data)
			if err != nil {
				return nil, err
			}
			entries = append(entries, e)
		}
		return entries, nil
	}
	cons, err := str.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream store: reading topic %q: %w", topic, err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
		defer dcancel()
		_ = str.DeleteConsumer(dctx, cons.CachedInfo().Name) // else it expires after a minute
	}()
	// The consumer counted what it has to deliver when it was made; fetch that many, waiting
	// only if entries vanish meanwhile (a Trim), which ends the read early.
	n = min(n, int(cons.CachedInfo().NumPending))
	r := run{s: s, str: str, topic: topic, next: from, entries: entries}
	for r.taken() < n {
		batch, err := cons.Fetch(n-r.taken(), jetstream.FetchMaxWait(readWait))
		if err != nil {
			return nil, fmt.Errorf("jetstream store: reading topic %q: %w", topic, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("jetstream store: reading topic %q: %w", topic, err)
			}
			if err := r.add(ctx, md.Sequence.Stream, m.Data()); errors.Is(err, errRunEnds) {
				return r.entries, nil
			} else if err != nil {
				return nil, err
			}
			if r.taken() >= n {
				// All counted: the fetch, short of the messages lost on the way, would
				// wait for them until it gives up (seconds); its goroutine ends by itself.
				return r.entries, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("jetstream store: reading topic %q: %w", topic, err)
		}
		if got == 0 {
			break // trimmed meanwhile
		}
	}
	return r.entries, nil
}

// run is the contiguous run a Read's consumer builds. The consumer acknowledges nothing
// (AckNone), so a message it sent that never arrived is gone from its delivery: the client's
// connection to NATS dropped and came back while the read was under way (a NATS server
// lost), or the fetch gave up waiting on a starved machine. The next message then comes
// after a hole. add fills a hole from the stream with single-message gets before it takes
// the message after it: an entry the stream has is never left out of the run. A message
// the get does not find is passed over only when the stream says it is gone for good
// (trimmed or deleted, see [gone]); otherwise the run ends before it (errRunEnds), since the
// server that answered may not have it yet (the stream's leader changed while a NATS server
// was lost), and the caller reads from there again later.
type run struct {
	s       *Store
	str     jetstream.Stream
	topic   string
	next    uint64 // the sequence number the run needs next
	entries []store.Entry
}

// taken is how many of the stream's messages the run has taken: its entries, those passed
// over included.
func (r *run) taken() int { return len(r.entries) }

// add takes the message the consumer delivered as sequence number seq.
func (r *run) add(ctx context.Context, seq uint64, data []byte) error {
	if seq < r.next {
		return nil // delivered twice
	}
	for ; r.next < seq; r.next++ {
		m, err := r.str.GetMsg(ctx, r.next)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			g, gerr := gone(ctx, r.str, r.next)
			if gerr != nil {
				return fmt.Errorf("jetstream store: reading topic %q at %d (a message its read did not get): %w", r.topic, r.next, gerr)
			}
			if g {
				continue
			}
			return errRunEnds
		}
		if err != nil {
			return fmt.Errorf("jetstream store: reading topic %q at %d (a message its read did not get): %w", r.topic, r.next, err)
		}
		if err := r.take(r.next, m.Data); err != nil {
			return err
		}
	}
	if err := r.take(seq, data); err != nil {
		return err
	}
	r.next = seq + 1
	return nil
}

// errRunEnds is add's answer for a hole it cannot fill yet: the run ends before it.
var errRunEnds = errors.New("the run ends at a message the stream did not return")

// gone reports whether a message a get did not find has left the journal for good: trimmed
// (below the stream's first sequence number) or deleted. It asks the stream (its leader, with
// replicas) for its state, with the numbers of deleted messages: a journal is only ever
// trimmed by the store, so that list is empty unless someone deleted messages by hand.
func gone(ctx context.Context, str jetstream.Stream, seq uint64) (bool, error) {
	info, err := str.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return false, err
	}
	return seq < info.State.FirstSeq || slices.Contains(info.State.Deleted, seq), nil
}

func (r *run) take(seq uint64, data []byte) error {
	e, err := r.s.decodeJournal(r.topic, seq, data)
	if err == nil {
		r.entries = append(r.entries, e)
	}
	return err
}

// decodeJournal decodes the journal message seq of topic. A message of this store's format
// that does not decode (one without an event, cut short, bad lengths) is no event Append
// wrote — it writes only what decodes — but a message someone else published to the
// journal's subject, or damage: it is passed over, as an entry without an event (see
// [store.Entry]) so that every reader's cursor moves past it and the subscriptions deliver
// the entries around it, and logged as an ERROR and counted ([DamageEntry], [Store.Health])
// once (the first read that reaches it).
// Failing the read instead would restart each subscription reaching it for good (a
// subscription actor's failed read is retried by a restart); leaving it out of the read
// would leave a subscription whose whole read was such messages where it was, reading them
// again for good. A message of a format this release does not know is an error: it may be an
// event a newer release wrote, which must not be passed over; upgrade this node.
func (s *Store) decodeJournal(topic string, seq uint64, data []byte) (store.Entry, error) {
	e, err := decodeEntry(seq, data)
	switch {
	case err == nil:
		return e, nil
	case (len(data) == 0 || data[0] == formatV1) && errors.Is(err, errCorrupt):
		if s.passedOver(topic, seq) {
			s.opts.Logger.Error("jetstream store: a journal message does not decode and is passed over: it is not an event egrid stored (a message published to the journal's subject by something else, or damage); the subscriptions deliver the entries around it. Give publish rights on the journal's subjects to egrid's NATS user only",
				"topic", topic, "seq", seq, "err", err)
			s.damaged(DamageEntry)
		}
		return store.Entry{Seq: seq}, nil
	default:
		return store.Entry{}, fmt.Errorf("jetstream store: topic %q entry %d (a newer release's format? upgrade this node): %w", topic, seq, err)
	}
}

// passedOver records that the journal message seq of topic was passed over and reports
// whether no read had passed over it (or one after it) before: each is logged once, not at
// every subscription's read. It keeps one number per topic.
func (s *Store) passedOver(topic string, seq uint64) bool {
	s.passedMu.Lock()
	defer s.passedMu.Unlock()
	if seq <= s.passed[topic] {
		return false
	}
	if s.passed == nil {
		s.passed = make(map[string]uint64)
	}
	s.passed[topic] = seq
	return true
}

func maxU(a, b, c uint64) uint64 { return max(a, b, c) }

// Trim implements [store.Store]: a purge of the stream below through+1, which keeps the
// stream's last sequence number (so the numbering continues). through is capped at LastSeq:
// purging beyond it would move the numbering on.
func (s *Store) Trim(ctx context.Context, topic string, through uint64) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	str, info, err := s.streamInfo(ctx, topic)
	if err != nil {
		return err
	}
	through = min(through, info.State.LastSeq)
	if through < info.State.FirstSeq {
		return nil
	}
	if err := str.Purge(ctx, jetstream.WithPurgeSequence(through+1)); err != nil {
		return fmt.Errorf("jetstream store: trimming topic %q through %d: %w", topic, through, err)
	}
	return nil
}
