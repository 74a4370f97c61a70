package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/testkit"
)

// heldCatalogue is a JetStream store whose reads of the topic catalogue, once held is set,
// wait until released is closed (or their ctx ends): a cluster's store that is slow to
// answer. entered gets one value per read that waits.
type heldCatalogue struct {
	store.Store
	held     atomic.Bool
	entered  chan struct{}
	released chan struct{}
}

func (s *heldCatalogue) Topics(ctx context.Context) ([]store.Definition, error) {
	if s.held.Load() {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		select {
		case <-s.released:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Topics(ctx)
}

// TestUnauthenticatedPublishHoldsNoPublishSlot runs the main server of a cluster node with
// --max-publish-bodies 1. A publish without a key to a topic the node does not know waits
// for a read of the cluster's store, which is slow; meanwhile a publish with the key of a
// topic the node knows is served at once: the request without a key holds no publish slot
// while its topic is looked up, so clients without any key cannot keep the slots busy and
// push the publishers that have one into 429. The request without a key is then answered
// 401, as to a wrong key.
func TestUnauthenticatedPublishHoldsNoPublishSlot(t *testing.T) {
	natsc := testkit.StartNATSCluster(t, 1)
	nc, err := nats.Connect(natsc.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.Open(t.Context(), nc, jetstream.Options{Prefix: "SLOTS", Memory: true, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close()
	st := &heldCatalogue{Store: js, entered: make(chan struct{}, 1), released: make(chan struct{})}
	r, err := router.New(router.Config{Cluster: cluster.Options{NodeName: "a", Prefix: "SLOTS"}},
		router.Deps{Store: st, NATS: nc, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	const key = "c2xvdHMtb2YtdGhlLXB1Ymxpc2hlcnMtd2l0aC1hLWtleQ=="
	if _, err := r.CreateTopic(t.Context(), "orders", router.TopicSpec{Key1: key}); err != nil {
		t.Fatal(err)
	}

	api := httpapi.New(r)
	srv := mainServer(httpserver.Config{MaxPublishBodies: 1, PublishWait: 100 * time.Millisecond}, api, api, r, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	publish := func(topic, key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/topics/"+topic+"/api/events", strings.NewReader(`[{"id":"e1","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{},"dataVersion":"1"}]`))
		if key != "" {
			req.Header.Set("aeg-sas-key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}

	st.held.Store(true)
	type answer struct {
		code int
		body string
	}
	unkeyed := make(chan answer, 1)
	go func() {
		code, body := publish("nowhere", "")
		unkeyed <- answer{code, body}
	}()
	select {
	case <-st.entered: // the publish without a key waits for the store
	case a := <-unkeyed:
		t.Fatalf("the publish without a key was answered before its topic was looked up: %d %s", a.code, a.body)
	case <-time.After(30 * time.Second):
		t.Fatal("the publish without a key did not look its topic up in the store within 30s")
	}

	if code, body := publish("orders", key); code != http.StatusOK {
		t.Errorf("a publish with the key while one without a key waits for the store: %d %s; want 200", code, body)
	}

	st.held.Store(false)
	close(st.released)
	select {
	case a := <-unkeyed:
		if a.code != http.StatusUnauthorized || !strings.Contains(a.body, `"code":"Unauthorized"`) {
			t.Errorf("the publish without a key to a topic that does not exist: %d %s; want 401", a.code, a.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the publish without a key was not answered within 30s of the store's answer")
	}
}
