package cluster_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
)

// lineLog collects the lines nodes log, at Info level, and passes them to the test's log.
type lineLog struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(p))
	l.mu.Unlock()
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// count returns how many lines hold every one of parts.
func (l *lineLog) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// A subscription whose stored state does not decode (its definition does) is started afresh
// by the store as its actor loads it, with a new epoch: the node's later syncs take that life
// as the one its actor runs, and neither start the actor again nor say the subscription was
// deleted and created again on another node.
func TestStateRepairedOnLoadIsNotStartedAgain(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t)
	logs := &lineLog{t: t}
	c.configure = func(name string, _ *router.Config, deps *router.Deps) {
		deps.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", name)
	}
	a := c.start("a")
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if err := a.r.CreateSubscription(ctx, "orders", "billing", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	spec, err := a.r.Topic("orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The record's head (cursor, epoch, definition) intact, its parked count cut off.
	kv := metaBucket(t, c, a)
	e, err := kv.Get(ctx, "sub.orders.billing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "sub.orders.billing", e.Value()[:len(e.Value())-1]); err != nil {
		t.Fatal(err)
	}

	b := c.start("b")
	eventually(t, 30*time.Second, "billing running on b, its state loaded", func() bool {
		_, err := b.r.Status(ctx, "orders", "billing")
		return b.r.RunsSubscription("orders", "billing") && err == nil
	})
	// A topic only the store holds (no notice): b learns of it from a full read of the
	// definitions, which reads orders' subscriptions first, after the state was repaired.
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.st.PutTopic(ctx, "zz", raw); err != nil {
		t.Fatal(err)
	}
	eventually(t, 6*leaseTTL+10*time.Second, "a full read of the definitions on b", func() bool {
		_, err := b.r.TopicName("zz")
		return err == nil
	})
	if n := logs.count("deleted and created again"); n != 0 {
		t.Errorf("%d lines say billing was deleted and created again on another node, want none: its state was started afresh here", n)
	}
	if n := logs.count("node=b", "subscription placed on this node", "subscription=billing"); n != 1 {
		t.Errorf("billing placed on b %d times, want once: nothing to start it again for", n)
	}
	if err := publish(t, b.r, "orders", "e1"); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	eventually(t, 20*time.Second, "e1 delivered to billing on b", func() bool {
		for _, d := range c.rec.attemptsOf("e1") {
			if d.sub == "billing" && d.node == "b" {
				return true
			}
		}
		return false
	})
}
