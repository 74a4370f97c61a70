package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
)

// A key of the meta bucket that does not decode into a name (an escape cut short: not a key
// egrid writes) no longer stops a node from reading the definitions: a topic another node
// stored a moment ago is found through the lookup as before. Before, the listing of the
// topics failed on that key, every time, and such a topic answered "store unavailable,
// retry" for good.
func TestClusterReadsDefinitionsPastAKeyThatDoesNotDecode(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t)
	a := c.start("a")
	kv := metaBucket(t, c, a)
	if _, err := kv.Put(ctx, "topic.a_zz", []byte("not egrid's")); err != nil {
		t.Fatal(err)
	}
	if err := a.st.PutTopic(ctx, "fresh", []byte(`{}`)); err != nil { // as another node's create, its notice not come
		t.Fatal(err)
	}
	if _, err := a.r.Topic("fresh"); err != nil {
		t.Errorf("a topic only the store knows, past a key that does not decode: %v; want it found", err)
	}
}

// damageableStore fails the reads of the topic catalogue, while damaged is set, as a store
// that finds the definitions damaged does (an error matching store.ErrCorrupt).
type damageableStore struct {
	store.Store
	damaged *atomic.Bool
}

func (s damageableStore) Topics(ctx context.Context) ([]store.Definition, error) {
	if s.damaged.Load() {
		return nil, fmt.Errorf("%w: the topic definitions are damaged; restore the store from a backup", store.CorruptSentinel("corrupt value"))
	}
	return s.Store.Topics(ctx)
}

// Damage met in cluster mode is said as damage, never as a store to retry: a subscription
// whose stored record does not decode refuses a create of its name with ErrStoreDamaged
// (wrapping store.ErrCorrupt, saying what to do), and a publish over HTTP to a topic the node
// must look up in a store whose definitions are damaged answers 500 saying so, without
// Retry-After. Before, both were ErrUnavailable: "retry later" (503 with Retry-After), which
// never helps.
func TestClusterDamagedStoredDataIsNotUnavailable(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t)
	var damaged atomic.Bool
	c.configure = func(_ string, cfg *router.Config, deps *router.Deps) {
		cfg.InsecureDev = true
		deps.Store = damageableStore{Store: deps.Store, damaged: &damaged}
	}
	a := c.start("a")
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := a.st.PutSubscription(ctx, "orders", "garbled", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	err := a.r.CreateSubscription(ctx, "orders", "garbled", router.SubscriptionSpec{Destination: router.SinkDestination("hook")})
	if !errors.Is(err, router.ErrStoreDamaged) || !errors.Is(err, store.ErrCorrupt) || errors.Is(err, router.ErrUnavailable) ||
		!strings.Contains(err.Error(), "does not decode") || !strings.Contains(err.Error(), "restore the store from a backup") {
		t.Errorf("CreateSubscription over a stored record that does not decode: %v; want ErrStoreDamaged saying what is damaged and what to do, not ErrUnavailable", err)
	}

	damaged.Store(true)
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/topics/unknown/api/events", strings.NewReader(`[{"id":"1","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{},"dataVersion":"1"}]`))
	req.Host = "localhost" // --insecure-dev lets in requests without credentials from this machine only (router/devguard)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	httpapi.New(a.r).ServeHTTP(rec, req)
	if body := rec.Body.String(); rec.Code != http.StatusInternalServerError || rec.Header().Get("Retry-After") != "" ||
		!strings.Contains(body, "damaged") || !strings.Contains(body, "retrying does not help") {
		t.Errorf("publish to a topic looked up in a store whose definitions are damaged: %d (Retry-After %q) %s; want 500 without Retry-After saying the data is damaged",
			rec.Code, rec.Header().Get("Retry-After"), body)
	}
}
