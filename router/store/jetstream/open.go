package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Opening the store: Dial connects and Open opens or creates the key-value buckets (topic and
// subscription records, the dead-letter outbox, delivery histories) and the parked-events
// stream, binds each bucket's stream for complete listings (scan.go), and lets the
// parked-events stream keep every copy of a subject (parkedCopies).

// Dial connects to the NATS server at url and opens the store on it; Close closes the
// connection too.
func Dial(ctx context.Context, url string, opts Options) (*Store, error) {
	nc, err := nats.Connect(url, nats.Name("egrid store"))
	if err != nil {
		return nil, fmt.Errorf("jetstream store: connecting to %s: %w", RedactURLs(url), RedactError(err))
	}
	s, err := Open(ctx, nc, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownsNC = true
	return s, nil
}

// Open opens the store on an established connection, creating its key-value buckets and its
// parked-events stream when they do not exist (with [Options.Replicas] and storage); existing
// ones are used as they are, never updated (change their replicas with the nats CLI). Close
// leaves the connection open: the caller owns it.
//
// Nodes of a cluster that start together race to create the buckets, which then have no
// leader for a moment (seconds while the NATS servers start too), and a server whose view of
// the cluster lags answers for a moment that a bucket just created does not exist. Open waits
// for them: it tries again while JetStream answers so (see notReadyYet), each try bounded by
// [Options.Timeout], for up to a minute (openWait) or until ctx ends. What cannot heal by
// waiting fails at once: JetStream not enabled on the servers or for the account (wrapping
// [jetstream.ErrJetStreamNotEnabled] or [jetstream.ErrJetStreamNotEnabledForAccount]), a
// max_payload too small, a configuration JetStream refuses.
func Open(ctx context.Context, nc *nats.Conn, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if mp := nc.MaxPayload(); mp < MinMaxPayload {
		return nil, fmt.Errorf("jetstream store: the NATS server's max_payload is %d bytes, which cannot hold a 1 MiB event; set max_payload: 4MB in its configuration (at least %d bytes)", mp, MinMaxPayload)
	}
	opts = opts.withDefaults()
	// Writers pipeline up to maxPipeline events each, and one Append can hold a request's
	// 5000 events: leave room for many topics' pipelines before publishes stall.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		return nil, fmt.Errorf("jetstream store: %w", err)
	}
	s := &Store{nc: nc, js: js, opts: opts, writers: make(map[string]*writer), subs: make(map[string]*subEntry), purging: make(map[string]chan struct{})}
	deadline := time.Now().Add(openWait)
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		err := s.open(tctx)
		cancel()
		switch {
		case err == nil:
			return s, nil
		case errors.Is(err, nats.ErrNoResponders):
			// No server answers the JetStream API: none of them runs JetStream.
			return nil, fmt.Errorf("%w (%w)", err, jetstream.ErrJetStreamNotEnabled)
		case !notReadyYet(err) || ctx.Err() != nil:
			return nil, err
		case time.Now().Add(wait).After(deadline):
			return nil, fmt.Errorf("%w (still so after waiting %v for the buckets and streams; check that the NATS servers run with JetStream and have formed their cluster)", err, openWait)
		}
		opts.Logger.Info("jetstream store: the buckets and streams are not ready yet (just created, or the NATS servers are starting); waiting for them", "try", try, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// openWait bounds how long [Open] waits for the buckets and streams to answer.
const openWait = time.Minute

// notReadyYet reports whether err is what JetStream answers while the buckets and streams are
// not ready yet, which waiting heals: a call timing out or answered "no response" (a stream
// without a leader yet), "not found" for a bucket or stream another node has just created (a
// server whose view lags), "stream name already in use" (another node's create of it won),
// or a 503 of the JetStream API (its meta group without a leader yet).
func notReadyYet(err error) bool {
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, nats.ErrNoResponders) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == 503
}

// open opens or creates the buckets and the parked-events stream once, within ctx.
func (s *Store) open(ctx context.Context) error {
	opts, js := s.opts, s.js
	var err error
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		desc string
	}{
		{&s.meta, opts.Prefix + "_meta", "egrid topic and subscription definitions and subscription state"},
		{&s.dead, opts.Prefix + "_deadletters", "egrid dead-letter outbox"},
		{&s.history, opts.Prefix + "_history", "egrid delivery histories of events"},
	} {
		*b.kv, err = js.KeyValue(ctx, b.name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			*b.kv, err = s.createBucket(ctx, b.name, b.desc)
		}
		if err != nil {
			return fmt.Errorf("jetstream store: creating bucket %s: %w", b.name, err)
		}
	}
	for _, b := range []struct {
		str  **bucketStream
		name string
	}{{&s.metaStream, opts.Prefix + "_meta"}, {&s.deadStream, opts.Prefix + "_deadletters"}, {&s.historyStream, opts.Prefix + "_history"}} {
		str, err := js.Stream(ctx, "KV_"+b.name)
		if err != nil {
			return fmt.Errorf("jetstream store: opening the stream of bucket %s: %w", b.name, err)
		}
		*b.str = &bucketStream{js: js, name: "KV_" + b.name, str: str}
	}
	s.parked, err = js.Stream(ctx, opts.Prefix+"_parked")
	if isStreamNotFound(err) {
		s.parked, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:              opts.Prefix + "_parked",
			Description:       "egrid parked events' copies of their events",
			Subjects:          []string{opts.Prefix + ".parked.>"},
			MaxMsgsPerSubject: -1, // see parkedCopies
			Discard:           jetstream.DiscardOld,
			Storage:           s.storage(),
			Replicas:          opts.Replicas,
			AllowDirect:       s.directReads(),
		})
	}
	if err != nil {
		return fmt.Errorf("jetstream store: creating stream %s_parked: %w", opts.Prefix, err)
	}
	return s.parkedCopies(ctx)
}

// parkedCopies lets the parked-events stream keep every copy of a subject, as streams of
// earlier releases (one message per subject) did not. Two nodes can park the same event at
// once while a subscription changes hands, each writing its copy before its record: the one
// whose record write is fenced deletes its own copy by its sequence number (see
// updateRecord), which must leave the other's, the one the committed record names. With one
// message per subject the later copy replaced the earlier, and the fenced node's delete could
// take the only copy the committed record has. Copies go when their event is unparked (a
// purge of the subject) or their subscription or topic is deleted.
func (s *Store) parkedCopies(ctx context.Context) error {
	info, err := s.parked.Info(ctx)
	if err != nil {
		return fmt.Errorf("jetstream store: reading stream %s_parked: %w", s.opts.Prefix, err)
	}
	if info.Config.MaxMsgsPerSubject == -1 {
		return nil
	}
	cfg := info.Config
	cfg.MaxMsgsPerSubject = -1
	if s.parked, err = s.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("jetstream store: letting stream %s_parked keep every copy of a parked event: %w", s.opts.Prefix, err)
	}
	return nil
}

// directReads says whether the store's streams allow direct gets. A direct get may be
// answered by any replica, and a follower that has not caught up answers with what it has: a
// journal entry another node appended a moment ago "not found", a subscription state one
// revision old (whose next write is then fenced), a topic created a moment ago unknown. On a
// replicated store every read therefore goes to the stream's leader, which holds everything
// acknowledged; a single replica is its own leader and keeps the cheaper direct gets. Streams
// and buckets get this when they are created: changing it on a running cluster's streams
// while nodes start together made their reads time out.
func (s *Store) directReads() bool { return s.opts.Replicas <= 1 }

// createBucket creates a key-value bucket holding one value per key. nats.go creates buckets
// with direct gets on; a replicated store creates the bucket's stream itself, the same but
// for direct gets (see directReads), and binds it, so its reads go to the leader.
func (s *Store) createBucket(ctx context.Context, name, desc string) (jetstream.KeyValue, error) {
	if s.directReads() {
		return s.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: name, Description: desc, History: 1, Storage: s.storage(), Replicas: s.opts.Replicas,
		})
	}
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KV_" + name, Description: desc, Subjects: []string{"$KV." + name + ".>"},
		MaxMsgsPerSubject: 1, MaxBytes: -1, MaxMsgSize: -1, MaxMsgs: -1, MaxConsumers: -1,
		Storage: s.storage(), Replicas: s.opts.Replicas,
		AllowRollup: true, DenyDelete: true, Duplicates: 2 * time.Minute, Discard: jetstream.DiscardNew,
		AllowDirect: false,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil, err
	}
	return s.js.KeyValue(ctx, name)
}

func (s *Store) storage() jetstream.StorageType {
	if s.opts.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}
