package sinks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/egridio/egrid/schemas"
)

// Sink delivers batches of events to one destination.
//
// Deliver is safe for concurrent use: a subscription keeps several batches in flight. It
// returns nil only when the destination accepted the whole batch (Event Grid's success codes,
// 200-204, for HTTP), and then sets [Batch.StatusCode] to the status it answered, if any. Any failure is reported as a *[DeliveryError] (possibly wrapped); a
// plain error is treated as GenericError. An *[UnsendableError] says some events can never be
// sent and nothing was sent: the fault is theirs, not the destination's. When ctx is done Deliver returns promptly with a
// TimedOut or Canceled outcome. Deliver must not retain b or its buffers after it returns: the
// subscription hands b.Body's buffer to the next attempt.
//
// A Deliver that ignores its context (a [Func] blocked on something else) holds up nothing
// for good: when the subscription stops or restarts it cancels ctx and waits a bounded grace
// (actors.DefaultStopGrace, 5 s); after that the attempt is abandoned and logged, its
// goroutine is left to end when Deliver returns, and its events, still unsettled, are
// attempted again after the restart. Whatever such a late Deliver achieves is ignored: an
// event it did deliver is delivered again (delivery is at least once).
type Sink interface {
	Deliver(ctx context.Context, b *Batch) error
}

// Closer is implemented by sinks that hold resources. Close is idempotent.
type Closer interface {
	Close() error
}

// Batch is one delivery request: one or more events encoded in the subscription's delivery
// schema. All events in a batch share one outcome (SPEC §2.3).
type Batch struct {
	// Topic and Subscription name where the batch comes from.
	Topic, Subscription string
	// Schema is the delivery schema of Body.
	Schema schemas.Schema
	// Body is the encoded request body and ContentType its media type.
	Body        []byte
	ContentType string
	// Events are the events in Body, in order.
	Events []*schemas.Event
	// DeliveryCount is the number of earlier attempts (aeg-delivery-count): 0 on a first
	// attempt. In a batch of events with different histories it is the largest. An attempt
	// cut by the subscription's stop is not counted, as an attempt in flight at a crash is not.
	DeliveryCount int
	// Headers are extra delivery headers (custom delivery attributes), name → value. A
	// dynamic one holds the value of the batch's first event, as a webhook request's does.
	Headers map[string]string
	// EventHeaders, when not nil, holds each event's own extra delivery headers, in the
	// order of Events: a destination with dynamic headers ([HeaderMappings.HasDynamic])
	// delivering more than one event. A sink that sends each event as a message of its own
	// (a broker) gives each message its event's headers from here instead of Headers.
	EventHeaders []map[string]string
	// InputSchema is the topic's input schema, the schema of Events (0: the same as Schema),
	// and TopicID the topic's resource ID. A sink that encodes events one by one (a broker
	// publishing one message per event) encodes them with [Batch.Encoding].
	InputSchema schemas.Schema
	TopicID     string
	// EncodeOptions are the subscription's extensions to the encoding (zero: Azure's).
	EncodeOptions schemas.EncodeOptions

	// StatusCode is the one field a sink writes: when Deliver returns nil, the status the
	// destination answered the batch with (200-204 for a webhook); a destination without
	// statuses (a broker, most [Func]s) leaves it 0. A failure's status is in its
	// *[DeliveryError] instead. The subscription reads it once Deliver has returned, for the
	// attempt's record (the debug log, egrid explain); a sink that passes a copy of the batch
	// to another copies it back.
	StatusCode int
}

// Encoding returns how the batch's events are encoded in its delivery schema.
func (b *Batch) Encoding() schemas.Encoding {
	out := b.Schema
	if out == 0 {
		out = schemas.EventGrid
	}
	in := b.InputSchema
	if in == 0 {
		in = out
	}
	return schemas.Encoding{
		In: in, Out: out, TopicID: b.TopicID, Batched: b.ContentType == schemas.ContentTypeCloudEventsBatch,
		Options: b.EncodeOptions,
	}
}

// Func adapts a Go function to a [Sink]. The function gets the same retry, batching and
// dead-letter semantics as a webhook: return nil for success (setting [Batch.StatusCode] if
// the destination answered with a status), a *[DeliveryError] to report a specific outcome,
// or any other error for GenericError. A panic in the function is a bug:
// supervision restarts the subscription and the batch is delivered again.
type Func func(ctx context.Context, b *Batch) error

// Deliver calls f.
func (f Func) Deliver(ctx context.Context, b *Batch) error { return f(ctx, b) }

// DeliveryError describes a failed attempt.
type DeliveryError struct {
	// Outcome classifies the failure (never schemas.Delivered).
	Outcome schemas.Outcome
	// StatusCode is the HTTP status the destination answered with, or 0 when there was no
	// HTTP response.
	StatusCode int
	// RetryAfter is the destination's Retry-After header verbatim (seconds or an HTTP date),
	// or empty. router/retry interprets it.
	RetryAfter string
	// Err is the underlying cause, if any.
	Err error
}

// Error describes the failure.
func (e *DeliveryError) Error() string {
	msg := e.Outcome.String()
	if e.StatusCode != 0 {
		msg = fmt.Sprintf("%s (HTTP %d)", msg, e.StatusCode)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *DeliveryError) Unwrap() error { return e.Err }

// AsDeliveryError turns any non-nil error from [Sink.Deliver] into a *DeliveryError: a wrapped
// one is returned as is, context errors become TimedOut or Canceled, anything else is a
// GenericError.
func AsDeliveryError(err error) *DeliveryError {
	var de *DeliveryError
	switch {
	case errors.As(err, &de):
		return de
	case errors.Is(err, context.DeadlineExceeded):
		return &DeliveryError{Outcome: schemas.TimedOut, Err: err}
	case errors.Is(err, context.Canceled):
		return &DeliveryError{Outcome: schemas.Canceled, Err: err}
	}
	return &DeliveryError{Outcome: schemas.GenericError, Err: err}
}

// UnsendableError reports that a batch was not delivered because some of its events can never
// be sent, whatever the destination does: an event cannot be encoded in the delivery schema
// (*[schemas.EncodeError]), a delivery header cannot be built from it (*[schemas.HeaderError],
// such as a control character in its id), or it is over the destination's size limit. It is
// the events' own fault, not the destination's (SPEC §8). A sink returns it, as a rule, before
// sending anything of the batch; a destination that refuses an event only as it comes to it
// (a broker's limit it does not tell beforehand) may have taken the events before it, which
// Sent counts. Either way the subscription ends the listed events alone (router/retry decides
// how: [schemas.UndeliverableDueToEventContent]) and sends the others again without them, never
// counting it against the endpoint or its probation.
type UnsendableError struct {
	// Faults are the events at fault, in increasing Index order; there is at least one.
	Faults []EventFault
	// Sent is how many events of the batch, from its first, the destination took before it
	// refused the first event of Faults: they are sent again with the others, so they may
	// arrive twice. 0: nothing of the batch was sent. The events after the refused one were
	// not sent.
	Sent int
}

// EventFault is one event of a batch that cannot be sent.
type EventFault struct {
	// Index is the event's position in [Batch.Events].
	Index int
	// Err says why it cannot be sent.
	Err error
}

// Error lists the events at fault.
func (e *UnsendableError) Error() string {
	var b strings.Builder
	switch {
	case e.Sent <= 0:
		b.WriteString("events that can never be sent, nothing was sent: ")
	case e.Sent == 1:
		b.WriteString("events that can never be sent; batch event 0 was sent before the destination refused the first of them, and is sent again with the others (it may arrive twice): ")
	default:
		fmt.Fprintf(&b, "events that can never be sent; batch events 0 to %d were sent before the destination refused the first of them, and are sent again with the others (they may arrive twice): ", e.Sent-1)
	}
	for i, f := range e.Faults {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "batch event %d: %v", f.Index, f.Err)
	}
	return b.String()
}

// Unwrap returns the faults' errors.
func (e *UnsendableError) Unwrap() []error {
	errs := make([]error, len(e.Faults))
	for i, f := range e.Faults {
		errs[i] = f.Err
	}
	return errs
}

// DefaultTimeout is the response timeout of one attempt (SPEC §2.1).
const DefaultTimeout = 30 * time.Second
