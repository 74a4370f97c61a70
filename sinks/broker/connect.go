package broker

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

// dialTimeout bounds connecting to a broker.
const dialTimeout = 5 * time.Second

// answer is what became of a message handed out (see handOut).
type answer int

const (
	ended      answer = iota // the subscription ended first
	acked                    // the reader acked it
	nacked                   // the reader nacked it
	unanswered               // the bound passed first
)

// handOut sends m on out, with a context that ends when it returns, and waits for the
// reader's answer, for at most bound (0: no bound), or until ctx ends or closing closes.
func handOut(ctx context.Context, closing <-chan struct{}, m *message.Message, out chan<- *message.Message, bound time.Duration) answer {
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.SetContext(mctx)
	select {
	case out <- m:
	case <-ctx.Done():
		return ended
	case <-closing:
		return ended
	}
	var timeout <-chan time.Time
	if bound > 0 {
		t := time.NewTimer(bound)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-m.Acked():
		return acked
	case <-m.Nacked():
		return nacked
	case <-timeout:
		return unanswered
	case <-ctx.Done():
	case <-closing:
	}
	// The subscription ended, maybe just after the reader answered (select picks at random
	// among ready cases): an answer given still counts, or an acked message would come back.
	select {
	case <-m.Acked():
		return acked
	case <-m.Nacked():
		return nacked
	default:
		return ended
	}
}

// shorten cuts a value read from a broker for an error message.
func shorten(v string) string {
	const max = 64
	if len(v) <= max {
		return v
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + "..."
}

// UnreadableKey is the metadata key of a message a subscriber could read no payload from,
// holding what is wrong with it (an entry of a Redis stream with neither a payload field nor
// a single field). A source poisons a message carrying it, with that reason, as it does a
// malformed payload, without reading its payload. The key is reserved to egrid's own
// subscribers: a header, field or metadata entry of that name a message arrives with is
// dropped (dropReserved), so that no publisher can have its message poisoned unread.
const UnreadableKey = "egrid-unreadable"

// dropReserved deletes from m's metadata the keys only egrid's subscribers set
// (UnreadableKey). A message's metadata is read from its headers (NATS, RabbitMQ), its
// fields and metadata field (Redis) or its metadata column (PostgreSQL), which whoever
// publishes to the broker writes.
func dropReserved(m *message.Message) {
	delete(m.Metadata, UnreadableKey)
}
