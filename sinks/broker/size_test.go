package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
	"github.com/egridio/egrid/testkit/sinktest"
)

// bigEvent returns an Event Grid event whose data is a string of n bytes, as a topic holds
// it: within the 1 MiB publish limit when n is.
func bigEvent(t *testing.T, id string, n int) *schemas.Event {
	t.Helper()
	raw := fmt.Sprintf(`[{"id":%q,"subject":"/big","eventType":"Big.Event","eventTime":"2026-01-02T03:04:05Z","dataVersion":"1.0","data":"%s"}]`, id, strings.Repeat("x", n))
	evs, err := schemas.DecodeEventGrid([]byte(raw), "/subscriptions/x/resourceGroups/egrid/providers/Microsoft.EventGrid/topics/big", schemas.ClassicLimits)
	if err != nil {
		t.Fatalf("building an event of %d bytes: %v", n, err)
	}
	return evs[0]
}

// An event that publish accepted (1 MiB at most) but whose message, with its delivery
// headers, is over the NATS server's max_payload (1 MiB by default) is that event's own
// fault: Deliver publishes nothing of the batch and names it alone in an
// *sinks.UnsendableError, so the subscription ends it (UndeliverableDueToEventContent) and
// sends the others again, not counting it against the endpoint. It was a PayloadTooLarge
// failure of the whole batch, after the events before it had been stored.
func TestNATSMessageOverMaxPayloadIsTheEventsFault(t *testing.T) {
	server := brokertest.NATS(t)
	nc, err := nats.Connect(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	limit := nc.MaxPayload()
	subject := strings.ReplaceAll(brokertest.Unique("egrid.big."), "-", ".")
	stream := brokertest.Unique("EGRID_BIG_")
	brokertest.CreateStream(t, server, stream, subject)

	small := sinktest.EventGridEvents(t, "small", 2)
	// Under the limit as an event, over it as a message with its headers.
	big := bigEvent(t, "big-"+brokertest.Unique(""), int(limit)-300)
	if int64(len(big.Raw)) > limit {
		t.Fatalf("the event is %d bytes, over max_payload %d already", len(big.Raw), limit)
	}
	b := open(t, broker.Servers{NATS: &server})
	pub, _ := b.Publisher(broker.NATSJetStream)
	s := newSink(t, pub, subject)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, []*schemas.Event{small[0], big, small[1]}))
	var ue *sinks.UnsendableError
	if !errors.As(err, &ue) {
		t.Fatalf("Deliver = %v (%s), want an *sinks.UnsendableError naming the large event", err, sinks.AsDeliveryError(err).Outcome)
	}
	var tl *broker.TooLargeError
	if len(ue.Faults) != 1 || ue.Faults[0].Index != 1 || !errors.As(ue.Faults[0].Err, &tl) || tl.Limit != limit || tl.Size <= limit {
		t.Fatalf("faults %+v, want event 1 alone, over the limit of %d bytes", ue.Faults, limit)
	}
	if !strings.Contains(err.Error(), "max_payload") {
		t.Errorf("error %q does not name the limit", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("the stream holds %d messages of the refused batch, want none", info.State.Msgs)
	}

	// The others go through without it.
	if err := s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, small)); err != nil {
		t.Fatalf("Deliver of the other events: %v", err)
	}
}

// A JetStream stream's own max_msg_size is found only as a message is stored, after the
// messages of the batch before it: the *sinks.UnsendableError names the refused event and says
// how many were sent before it (Sent), in its message too, where it read "nothing was sent".
func TestNATSStreamMaxMsgSizeSaysWhatWasSent(t *testing.T) {
	server := brokertest.NATS(t)
	nc, err := nats.Connect(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subject := strings.ReplaceAll(brokertest.Unique("egrid.streamsize."), "-", ".")
	stream := brokertest.Unique("EGRID_STREAMSIZE_")
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage, MaxMsgSize: 4000,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })

	small := sinktest.EventGridEvents(t, "small", 3)
	b := open(t, broker.Servers{NATS: &server})
	pub, _ := b.Publisher(broker.NATSJetStream)
	s := newSink(t, pub, subject)
	err = s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, []*schemas.Event{small[0], small[1], bigEvent(t, "big", 6000), small[2]}))
	var ue *sinks.UnsendableError
	if !errors.As(err, &ue) || len(ue.Faults) != 1 || ue.Faults[0].Index != 2 {
		t.Fatalf("Deliver = %v (%s), want an *sinks.UnsendableError naming event 2 alone", err, sinks.AsDeliveryError(err).Outcome)
	}
	if ue.Sent != 2 {
		t.Errorf("Sent = %d, want 2: the events before the refused one were stored", ue.Sent)
	}
	if msg := err.Error(); strings.Contains(msg, "nothing was sent") || !strings.Contains(msg, "batch events 0 to 1 were sent") {
		t.Errorf("error %q does not say events 0 to 1 were sent", msg)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("the stream holds %d messages, want the 2 before the refused one", info.State.Msgs)
	}
}

// A broker refusing the one event of a batch for its size (a RabbitMQ max_message_size, a
// JetStream stream's max_msg_size, ...) is that event's fault: an *sinks.UnsendableError
// naming it, not a PayloadTooLarge failure of the endpoint.
func TestOneEventRefusedForItsSizeIsUnsendable(t *testing.T) {
	s, err := broker.New(failingPublisher{err: fmt.Errorf("publishing: %w", nats.ErrMaxPayload)}, broker.Config{Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Deliver(context.Background(), sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "one", 1)))
	var ue *sinks.UnsendableError
	if !errors.As(err, &ue) || len(ue.Faults) != 1 || ue.Faults[0].Index != 0 {
		t.Fatalf("Deliver of one event = %v, want an *sinks.UnsendableError naming it", err)
	}
	// In a batch of several, the broker did not say which: a failure of the batch.
	err = s.Deliver(context.Background(), sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "two", 2)))
	if errors.As(err, &ue) || sinks.AsDeliveryError(err).Outcome != schemas.PayloadTooLarge {
		t.Fatalf("Deliver of two events = %v, want PayloadTooLarge", err)
	}
}

// failingPublisher fails every Publish with err.
type failingPublisher struct{ err error }

func (p failingPublisher) Publish(string, ...*message.Message) error { return p.err }
func (failingPublisher) Close() error                                { return nil }
