package jetstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/internal/wire"
)

// Claims on a topic's name. A topic's journal stream, subscription records, parked events and
// histories are named after the topic alone, not after one life of it, so what a delete cut
// short left of an earlier life looks the same as what a live topic of the name holds. Only
// the holder of the name's key may remove them: a create first claims the key (the bucket's
// Create, or an Update on the revision of an expired claim), and only then removes leftovers,
// creates the journal stream and writes the definition over its claim; a delete first turns
// the definition into its claim (an Update on the revision read), removes what the topic
// held, and only then purges the key. A store that loses the claim's write removes nothing.
// Every reader takes a claimed name for one without a topic (topicExists, Topics), so no
// subscription is created and no node runs the topic while the claim holds.

// topicClaimV2 is the first byte of a topic key's value that is a claim, not a definition
// (formatV1, which releases before claims read; they take a claim for a damaged definition
// and leave it alone).
const topicClaimV2 = 2

// claimKind says what a claim is for.
type claimKind byte

const (
	claimCreate claimKind = 1 // the name is being created
	claimDelete claimKind = 2 // the topic is being deleted
)

func (k claimKind) String() string {
	switch k {
	case claimCreate:
		return "created"
	case claimDelete:
		return "deleted"
	}
	return fmt.Sprintf("claimKind(%d)", byte(k))
}

// claimGrace is added to a claim's work bound (the claiming store's Options.Timeout) to make
// its expiry: the margin for requests of the claim's holder still on their way to the server
// when its context ended, and for clocks of the nodes that differ. Past its expiry a claim is
// taken for the claim of a store that crashed, or lost NATS, in the middle: the next create of
// the name takes it over and finishes what it was doing.
const claimGrace = time.Minute

// awaitCheck bounds one wait for another store's claim to change before the key is read
// again: the watch may miss a delete's marker purged from the bucket's stream right after it.
const awaitCheck = time.Second

// claimTries bounds the looks of one create at a name: each one follows a claim write lost to
// another store's write of the key, or a wait for another store's claim.
const claimTries = 16

// topicValue is a topic key's value decoded: a definition, or a claim.
type topicValue struct {
	spec    []byte
	claim   claimKind // 0 for a definition
	id      uint64    // the claim's random number (in logs: which claim)
	expires time.Time // the claim's expiry
}

// appendClaim encodes a claim: version, kind, uvarint id, uvarint expiry (Unix milliseconds).
func appendClaim(dst []byte, kind claimKind, id uint64, expires time.Time) []byte {
	dst = append(dst, topicClaimV2, byte(kind))
	dst = binary.AppendUvarint(dst, id)
	return binary.AppendUvarint(dst, uint64(expires.UnixMilli()))
}

// decodeTopic decodes a topic key's value: a definition (formatV1, appendOpaque) or a claim.
func decodeTopic(b []byte) (topicValue, error) {
	if len(b) == 0 || b[0] != topicClaimV2 {
		spec, err := decodeOpaque(b)
		return topicValue{spec: spec}, err
	}
	d := wire.NewDecoder(b)
	d.Version(topicClaimV2)
	v := topicValue{claim: claimKind(d.Byte()), id: d.Uvarint()}
	v.expires = time.UnixMilli(int64(d.Uvarint()))
	if d.Err() == nil && v.claim != claimCreate && v.claim != claimDelete {
		d.Fail("bad claim kind")
	}
	if d.Err() == nil && len(d.Rest()) != 0 {
		d.Fail("bytes after a claim")
	}
	return v, d.Err()
}

// claim is a claim this store holds: the revision of the key it wrote, and the deadline of its
// work (its expiry less claimGrace).
type claim struct {
	rev      uint64
	deadline time.Time
}

// claimTopic writes a claim of kind on topic's key: with the bucket's Create when rev is 0,
// else on revision rev. A write another store's write of the key beat fails with an error
// wrapping errKeyTaken and writes nothing.
func (s *Store) claimTopic(ctx context.Context, topic string, rev uint64, kind claimKind) (claim, error) {
	deadline := time.Now().Add(s.opts.Timeout)
	val := appendClaim(nil, kind, newEpoch(), deadline.Add(claimGrace))
	var err error
	if rev == 0 {
		rev, err = s.meta.Create(ctx, topicKey(topic), val)
	} else {
		rev, err = s.meta.Update(ctx, topicKey(topic), val, rev)
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err) {
			err = fmt.Errorf("%w: %w", errKeyTaken, err)
		}
		return claim{}, fmt.Errorf("jetstream store: claiming topic %q to be %s: %w", topic, kind, err)
	}
	return claim{rev: rev, deadline: deadline}, nil
}

// within bounds ctx by the claim's deadline: the work done under a claim ends before the claim
// expires and another store may take it over.
func (c claim) within(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, c.deadline)
}

// createTopic finishes a create under claim c: it removes what an earlier life of the name
// left, creates the journal stream and writes the definition val over the claim. A create cut
// short leaves the claim, which the next create takes over once it has expired; a definition
// write that finds the claim taken over writes nothing and fails with store.ErrFenced (the
// store that took it finishes the create).
func (s *Store) createTopic(ctx context.Context, name string, val []byte, c claim) error {
	ctx, cancel := c.within(ctx)
	defer cancel()
	if err := s.dropTopicData(ctx, name); err != nil {
		return err
	}
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        s.streamName(name),
		Description: "egrid journal of topic " + name,
		Subjects:    []string{s.subject(name)},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		// The writer gives every message an ID only to chain a pipeline's messages
		// (Nats-Expected-Last-Msg-Id); a short window keeps the server's table of them small.
		Duplicates:  time.Second,
		Storage:     s.storage(),
		Replicas:    s.opts.Replicas,
		AllowDirect: s.directReads(),
	})
	if err != nil {
		return fmt.Errorf("jetstream store: creating the journal stream of topic %q: %w", name, err)
	}
	if _, err := s.meta.Update(ctx, topicKey(name), val, c.rev); err != nil {
		if isWrongLastSeq(err) {
			return fenced("topic "+name+" (its create ran past its claim, which another store took over)", err)
		}
		return fmt.Errorf("jetstream store: writing topic %q: %w", name, err)
	}
	return nil
}

// deleteTopic finishes a delete under claim c: it removes what the topic held and then the
// key. A delete cut short leaves the claim, which the next create takes over once it has
// expired, removing the rest.
func (s *Store) deleteTopic(ctx context.Context, name string, c claim) error {
	wctx, cancel := c.within(ctx)
	defer cancel()
	if err := s.dropTopicData(wctx, name); err != nil {
		return err
	}
	if err := s.meta.Purge(wctx, topicKey(name), jetstream.LastRevision(c.rev)); err != nil {
		if isWrongLastSeq(err) {
			return nil // a create took the expired claim over: the name is its now
		}
		return fmt.Errorf("jetstream store: deleting topic %q: %w", name, err)
	}
	s.dropMarker(ctx, topicKey(name))
	return nil
}

// awaitClaim waits until the claim v, revision rev of topic's key, changes (written over,
// purged), expires, or awaitCheck passed, whichever comes first; when ctx ends first, it fails
// saying the topic is being created or deleted elsewhere, wrapping store.ErrFenced.
func (s *Store) awaitClaim(ctx context.Context, topic string, rev uint64, v topicValue) error {
	busy := func(err error) error {
		return fmt.Errorf("jetstream store: topic %q is being %s by another node (its claim expires at %s): try again in a moment: %w (%v)",
			topic, v.claim, v.expires.UTC().Format(time.RFC3339), store.ErrFenced, err)
	}
	wait := min(time.Until(v.expires), awaitCheck)
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	w, err := s.meta.Watch(ctx, topicKey(topic))
	if err != nil {
		if ctx.Err() != nil {
			return busy(err)
		}
		return fmt.Errorf("jetstream store: watching topic %q: %w", topic, err)
	}
	defer func() { _ = w.Stop() }()
	seen := false // the claim was among the key's current value
	for {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil
			case e == nil: // the end of the key's current value
				if !seen {
					return nil // it changed before the watch started
				}
			case e.Revision() != rev:
				return nil
			default:
				seen = true
			}
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return busy(ctx.Err())
		}
	}
}
