package actors_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// lockedBuffer is a log destination safe for the actors' goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The ERROR of a subscription actor that failed and waits for its restart names its topic and
// subscription: it named the topic and the actor's process id ("$1/$3"), which says nothing
// to an operator, and two subscriptions' failures read alike.
func TestRestartLogNamesTheSubscription(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		var logs lockedBuffer
		sink := &countingSink{panicOn: map[int]bool{1: true}}
		h.Spawn(actors.TopicProps(&actors.TopicConfig{
			Name: "orders", Metrics: new(metrics.Set), Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			Subscriptions: []*actors.SubscriptionConfig{{
				SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: journalOf(t, "audit"), Metrics: new(metrics.Set)},
				Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true}, Sink: sink,
			}},
		}))
		h.Settle() // the sink panicked: audit waits for its restart
		found := false
		for line := range strings.Lines(logs.String()) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["msg"] != "subscription actor failed; restarting" {
				continue
			}
			found = true
			if rec[logattr.Topic] != "orders" || rec[logattr.Subscription] != "audit" {
				t.Errorf("restart logged as %s; want topic orders and subscription audit", strings.TrimSpace(line))
			}
		}
		if !found {
			t.Fatalf("no restart logged:\n%s", logs.String())
		}
	})
}
