package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/sinktest"
)

var (
	_ sinks.Sink   = (*broker.Sink)(nil)
	_ sinks.Closer = (*broker.Sink)(nil)
)

func TestNewValidates(t *testing.T) {
	pub := gochannel.NewGoChannel(gochannel.Config{}, nil)
	defer pub.Close()
	tests := []struct {
		name   string
		pub    message.Publisher
		cfg    broker.Config
		fields []string
	}{
		{name: "valid", pub: pub, cfg: broker.Config{Topic: "orders"}},
		{name: "no topic", pub: pub, cfg: broker.Config{}, fields: []string{"topic"}},
		{name: "blank topic", pub: pub, cfg: broker.Config{Topic: "  "}, fields: []string{"topic"}},
		{name: "no publisher", cfg: broker.Config{Topic: "orders"}, fields: []string{"publisher"}},
		{name: "every problem at once", fields: []string{"publisher", "topic"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := broker.New(tt.pub, tt.cfg)
			var got []string
			for _, e := range flatten(err) {
				var ce *broker.ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("problem %v is not a *broker.ConfigError", e)
				}
				got = append(got, ce.Field)
			}
			if strings.Join(got, ",") != strings.Join(tt.fields, ",") {
				t.Fatalf("New = %v; want problems with %v", err, tt.fields)
			}
			if (s == nil) != (len(tt.fields) > 0) {
				t.Fatalf("New returned sink %v with error %v", s, err)
			}
		})
	}
}

func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestMessages(t *testing.T) {
	eg := sinktest.EventGridEvents(t, "m", 2)
	ce := sinktest.CloudEvents(t, "c", 1)
	tests := []struct {
		name        string
		batch       *sinks.Batch
		contentType string
		dataVersion bool
	}{
		{name: "event grid batch", batch: sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, eg), contentType: schemas.ContentTypeJSON, dataVersion: true},
		{name: "cloud events batch", batch: sinktest.NewBatch(t, schemas.EventGrid, schemas.CloudEvents, eg), contentType: schemas.ContentTypeCloudEvent},
		{name: "single cloud event", batch: sinktest.NewBatch(t, schemas.CloudEvents, schemas.CloudEvents, ce), contentType: schemas.ContentTypeCloudEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.batch
			b.Headers = map[string]string{"x-tenant": "acme", "AEG-Event-Type": "spoofed", "Content-Type": "text/plain"}
			msgs, err := broker.Messages(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != len(b.Events) {
				t.Fatalf("%d messages for %d events", len(msgs), len(b.Events))
			}
			for i, m := range msgs {
				ev := b.Events[i]
				if m.UUID != ev.ID {
					t.Errorf("message %d UUID = %q, want the event id %q", i, m.UUID, ev.ID)
				}
				var obj map[string]any
				if err := json.Unmarshal(m.Payload, &obj); err != nil {
					t.Fatalf("payload %d is not one JSON object: %v: %s", i, err, m.Payload)
				}
				if obj["id"] != ev.ID {
					t.Errorf("payload %d has id %v, want %s", i, obj["id"], ev.ID)
				}
				want := map[string]string{
					"aeg-event-type": "Notification", "aeg-subscription-name": "SINKTEST-SUB",
					"aeg-delivery-count": "2", "aeg-output-event-id": ev.ID,
					"aeg-metadata-version": schemas.MetadataVersion(b.Schema),
					"content-type":         tt.contentType, "x-tenant": "acme",
				}
				if tt.dataVersion {
					want["aeg-data-version"] = "1.0"
				}
				if ev.Traceparent != "" {
					want["traceparent"] = ev.Traceparent
				}
				for k, v := range want {
					if got := m.Metadata.Get(k); got != v {
						t.Errorf("metadata %s = %q, want %q", k, got, v)
					}
				}
				if _, ok := m.Metadata["AEG-Event-Type"]; ok {
					t.Error("a custom header replaced aeg-event-type under another case")
				}
				if _, ok := m.Metadata["Content-Type"]; ok {
					t.Error("a custom header replaced content-type under another case")
				}
				if !tt.dataVersion {
					if _, ok := m.Metadata["aeg-data-version"]; ok {
						t.Error("a CloudEvents message carries aeg-data-version")
					}
				}
			}
		})
	}
}

// Each message is encoded from its event, not cut out of the batch body: an Event Grid event
// delivered as CloudEvents is converted, whatever the body holds.
func TestMessagesEncodeEachEvent(t *testing.T) {
	evs := sinktest.EventGridEvents(t, "mm", 2)
	b := sinktest.NewBatch(t, schemas.EventGrid, schemas.CloudEvents, evs)
	b.Body = []byte("not json")
	msgs, err := broker.Messages(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		want, _, err := schemas.Encoding{In: schemas.EventGrid, Out: schemas.CloudEvents, TopicID: b.TopicID}.AppendEvent(nil, evs[i])
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != string(want) || !strings.Contains(string(m.Payload), `"specversion":"1.0"`) {
			t.Errorf("message %d payload %s, want the converted event %s", i, m.Payload, want)
		}
	}
}

// Events that can never be sent are listed, every one, in an *sinks.UnsendableError; no
// message is published and the publisher is not called.
func TestDeliverReportsUnsendableEvents(t *testing.T) {
	pub := gochannel.NewGoChannel(gochannel.Config{}, nil)
	defer pub.Close()
	s, err := broker.New(pub, broker.Config{Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	evs := sinktest.EventGridEvents(t, "u", 4)
	bad1, bad3 := *evs[1], *evs[3]
	bad1.ID = "bad\nid"
	bad3.DataVersion = string([]byte{'1', 0x7f})
	evs[1], evs[3] = &bad1, &bad3
	msgs, err := pub.Subscribe(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	b := sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, evs)
	err = s.Deliver(context.Background(), b)
	var ue *sinks.UnsendableError
	if !errors.As(err, &ue) {
		t.Fatalf("Deliver = %v, want *sinks.UnsendableError", err)
	}
	if len(ue.Faults) != 2 || ue.Faults[0].Index != 1 || ue.Faults[1].Index != 3 {
		t.Fatalf("faults %+v, want events 1 and 3", ue.Faults)
	}
	var he *schemas.HeaderError
	if !errors.As(ue.Faults[1].Err, &he) || he.Field != "dataVersion" || he.Header != schemas.HeaderDataVersion {
		t.Errorf("fault of event 3 is %v, want a header error for dataVersion", ue.Faults[1].Err)
	}
	select {
	case m := <-msgs:
		t.Fatalf("message %s was published", m.UUID)
	default:
	}
}

// A publisher that never returns does not hold Deliver past its context, in virtual time.
func TestDeliverReturnsAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		pub := stuckPublisher{release: release}
		s, err := broker.New(pub, broker.Config{Topic: "orders"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		err = s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "stuck", 1)))
		if got := sinks.AsDeliveryError(err).Outcome; got != schemas.TimedOut {
			t.Fatalf("Deliver = %v (%s), want TimedOut", err, got)
		}
		if d := time.Since(start); d != 30*time.Second {
			t.Fatalf("Deliver returned after %s, want exactly the 30s attempt timeout", d)
		}
		close(release)
		if err := s.Close(); err != nil {
			t.Fatalf("Close after the publish ended: %v", err)
		}
		err = s.Deliver(context.Background(), sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "closed", 1)))
		if err == nil {
			t.Fatal("Deliver after Close succeeded")
		}
	})
}

func TestCloseIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		s, _ := broker.New(stuckPublisher{release: release}, broker.Config{Topic: "orders"})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "x", 1)))
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		_ = s.Deliver(ctx2, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "y", 1)))
		start := time.Now()
		if err := s.Close(); err == nil {
			t.Fatal("Close with a publish that never ends reported nothing")
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Fatalf("Close waited %s, want its 5s bound", d)
		}
	})
}

// stuckPublisher blocks every Publish until release is closed.
type stuckPublisher struct{ release chan struct{} }

func (p stuckPublisher) Publish(string, ...*message.Message) error {
	<-p.release
	return nil
}
func (stuckPublisher) Close() error { return nil }
