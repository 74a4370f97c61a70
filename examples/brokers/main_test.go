package main

import (
	"context"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/testkit/brokertest"
)

// TestFanOut runs the example: every event published to the topic reaches both the webhook
// and the JetStream stream, the latter as one message per event with the delivery headers.
func TestFanOut(t *testing.T) {
	n := brokertest.NATS(t)
	subject := strings.ReplaceAll(brokertest.Unique("egrid.example."), "-", "")
	brokertest.CreateStream(t, n, brokertest.Unique("EGRID_EXAMPLE_"), subject)

	hooked := make(chan string, 16)
	hook := httptest.NewServer(Hook{Handle: func(id string) { hooked <- id }})
	defer hook.Close()

	ctx := context.Background()
	f, err := NewFanOut(ctx, n.URL, hook.URL+"/hook", subject)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	sub, _ := f.Brokers.Subscriber("NatsJetStream")
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, err := sub.Subscribe(subCtx, subject)
	if err != nil {
		t.Fatal(err)
	}

	want := []string{"o-1", "o-2", "o-3"}
	for _, id := range want {
		if err := f.Router.Publish(ctx, "orders", map[string]any{
			"id": id, "subject": "/orders/" + id, "eventType": "Order.Created",
			"eventTime": "2026-01-02T03:04:05Z", "dataVersion": "1", "data": map[string]any{},
		}); err != nil {
			t.Fatal(err)
		}
	}
	var viaHook, viaNATS []string
	guard := time.After(60 * time.Second)
	for len(viaHook) < len(want) || len(viaNATS) < len(want) {
		select {
		case id := <-hooked:
			viaHook = append(viaHook, id)
		case m := <-msgs:
			if got := m.Metadata.Get("aeg-subscription-name"); got != "STREAM" {
				t.Errorf("NATS message %s has aeg-subscription-name %q, want STREAM", m.UUID, got)
			}
			viaNATS = append(viaNATS, m.UUID)
			m.Ack()
		case <-guard:
			t.Fatalf("after 60s the webhook got %v and NATS %v; want %v each", viaHook, viaNATS, want)
		}
	}
	sort.Strings(viaHook)
	sort.Strings(viaNATS)
	if strings.Join(viaHook, ",") != strings.Join(want, ",") || strings.Join(viaNATS, ",") != strings.Join(want, ",") {
		t.Fatalf("the webhook got %v and NATS %v; want %v each", viaHook, viaNATS, want)
	}
}
