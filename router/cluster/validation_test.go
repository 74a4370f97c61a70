package cluster_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/testkit"
)

// A subscription whose manual validation failed (its Failed record written by whichever node
// closed the window) and which an update on another node validates again starts afresh, as
// in Event Grid: it gets the events published from then on, none of those published while it
// was Failed, which its cursor, left where it failed, still held in the journal.
func TestRevalidatedSubscriptionStartsAfreshOnAnyNode(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	// The record a node writes when the window closes, straight into the store: the nodes
	// learn of it from their reads of the store.
	failedSubscription(t, a, a, b)
	if err := publish(t, a.r, "orders", "while-failed-1", "while-failed-2"); err != nil {
		t.Fatal(err)
	}
	if err := b.r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
		t.Fatalf("updating the Failed subscription on b: %v", err)
	}
	if err := publish(t, a.r, "orders", "after-1", "after-2", "after-3"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the events published after the update delivered", func() bool {
		for _, id := range []string{"after-1", "after-2", "after-3"} {
			if len(c.rec.attemptsOf(id)) == 0 {
				return false
			}
		}
		return true
	})
	var got []string
	for _, d := range c.rec.all() {
		got = append(got, d.ids...)
	}
	if slices.Contains(got, "while-failed-1") || slices.Contains(got, "while-failed-2") {
		t.Errorf("attempted %v; want only the events published after the update validated the subscription again", got)
	}
}

// windowHook is a WebHook endpoint every node reaches through one in-memory transport: it
// answers the SubscriptionValidation event 200 without validationResponse, so the
// subscription awaits the GET of its validationUrl (which it keeps, by subscription, and
// never fetches), and records the ids of the events delivered to it.
type windowHook struct {
	mu        sync.Mutex
	urls      map[string]string
	delivered []string
}

func (h *windowHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var evs []struct {
		ID   string `json:"id"`
		Data struct {
			ValidationURL string `json:"validationUrl"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &evs)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Header.Get("aeg-event-type") {
	case "SubscriptionValidation":
		if h.urls == nil {
			h.urls = map[string]string{}
		}
		if len(evs) == 1 {
			h.urls[r.Header.Get("aeg-subscription-name")] = evs[0].Data.ValidationURL
		}
	case "Notification":
		for _, e := range evs {
			h.delivered = append(h.delivered, e.ID)
		}
	}
}

func (h *windowHook) got(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.delivered, id)
}

// token returns the token of the validationUrl subscription sub was sent.
func (h *windowHook) token(t *testing.T, sub string) string {
	t.Helper()
	h.mu.Lock()
	raw := h.urls[strings.ToUpper(sub)]
	h.mu.Unlock()
	u, err := url.Parse(raw)
	if err != nil || u.Query().Get("token") == "" {
		t.Fatalf("the validationUrl of %s: %q (%v); want one with a token", sub, raw, err)
	}
	return u.Query().Get("token")
}

// manualCluster is a cluster whose nodes validate WebHook endpoints through hook, with a
// lease TTL of 15 s: the nodes read every definition again every 30 s, so within a test they
// learn of a record written straight into the store only when something makes them read it.
func manualCluster(t *testing.T, hook *windowHook) *testCluster {
	c := newCluster(t)
	c.ttl = 15 * time.Second
	tr := testkit.NewTransport()
	tr.Handle("hook.test", hook)
	c.configure = func(_ string, cfg *router.Config, deps *router.Deps) {
		cfg.PublicURL = "http://egrid.test"
		deps.HTTPClient = &http.Client{Transport: tr}
	}
	return c
}

// storedRecord returns subscription sub's stored record as JSON fields, and its provisioning
// record.
func storedRecord(t *testing.T, n *node, sub string) (rec, egrid map[string]any) {
	t.Helper()
	defs, err := n.st.Subscriptions(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Name == sub {
			if err := json.Unmarshal(d.Spec, &rec); err != nil {
				t.Fatal(err)
			}
			egrid, _ = rec["egrid"].(map[string]any)
			return rec, egrid
		}
	}
	t.Fatalf("subscription %s is not in the store", sub)
	return nil, nil
}

// putRecord writes subscription sub's record with egrid as its provisioning record straight
// into the store: the nodes learn of it only from their reads of the store, as when the
// notice of the node that wrote it is lost or late.
func putRecord(t *testing.T, n *node, sub string, rec, egrid map[string]any) {
	t.Helper()
	rec["egrid"] = egrid
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.st.PutSubscription(t.Context(), "orders", sub, b); err != nil {
		t.Fatal(err)
	}
}

// states returns the provisioning state of subscription sub on each of nodes.
func states(sub string, nodes ...*node) []string {
	var out []string
	for _, n := range nodes {
		p, err := n.r.Provisioning("orders", sub)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		out = append(out, p.State)
	}
	return out
}

func all(got []string, want string) bool {
	return len(got) > 0 && !slices.ContainsFunc(got, func(s string) bool { return s != want })
}

// A manual validation window is closed by one node: the one holding the cluster's duty,
// and only while the stored record still awaits the validation. Every node arms the window's
// timer from the stored deadline; every one used to close it, and one that had not heard of
// the record another node wrote when the endpoint fetched its validationUrl there
// overwrote it with Failed: the validated subscription never delivered.
//
// Node a creates the subscriptions with its clock 10 minutes minus a few seconds behind,
// so the deadline it stores comes within seconds for b and c, then leaves (its own timers
// would end the windows 10 minutes late); "validated" is then validated by a record written
// straight into the store, which b and c hear of only from the store, and "ignored" by
// nobody.
func TestValidationWindowClosedByOneNode(t *testing.T) {
	const ahead = 10 * time.Second // from the creation to the deadline
	hook := &windowHook{}
	c := manualCluster(t, hook)
	configure := c.configure
	c.configure = func(name string, cfg *router.Config, deps *router.Deps) {
		configure(name, cfg, deps)
		if name == "a" {
			deps.Now = func() time.Time { return time.Now().Add(ahead - router.ManualValidationWindow) }
		}
	}
	var mu sync.Mutex
	closed := map[string]int{} // "validation failed" lines by subscription
	c.onLog = func(line string) {
		if strings.Contains(line, "validationUrl was not fetched in time") {
			mu.Lock()
			defer mu.Unlock()
			for _, sub := range []string{"validated", "ignored"} {
				if strings.Contains(line, "subscription="+sub) {
					closed[sub]++
				}
			}
		}
	}
	a, b, cn := c.start("a"), c.start("b"), c.start("c")
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"validated", "ignored"} {
		if err := a.r.CreateSubscription(ctx, "orders", sub, router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 20*time.Second, "both subscriptions awaiting validation on b and c", func() bool {
		return all(append(states("validated", b, cn), states("ignored", b, cn)...), router.StateAwaitingManualAction)
	})
	rec, egrid := storedRecord(t, a, "validated")
	deadline, err := time.Parse(time.RFC3339Nano, fmt.Sprint(egrid["deadline"]))
	if err != nil {
		t.Fatalf("the stored deadline %v: %v", egrid["deadline"], err)
	}
	putRecord(t, a, "validated", rec, map[string]any{"handshake": egrid["handshake"]})
	if !time.Now().Before(deadline) {
		t.Fatalf("the test took until past the deadline %s to write the validated record; raise ahead", deadline)
	}
	a.stop()
	if err := publish(t, b.r, "orders", "e1"); err != nil {
		t.Fatal(err)
	}

	eventually(t, time.Minute, "ignored Failed in the store and on b and c", func() bool {
		_, eg := storedRecord(t, b, "ignored")
		return eg["provisioningState"] == router.StateFailed && all(states("ignored", b, cn), router.StateFailed)
	})
	mu.Lock()
	n := closed["ignored"]
	mu.Unlock()
	if n != 1 {
		t.Errorf("the window of ignored was closed %d times; want once, by the node holding the cluster's duty", n)
	}
	eventually(t, time.Minute, "e1 delivered to validated", func() bool { return hook.got("e1") })
	if _, eg := storedRecord(t, b, "validated"); eg["provisioningState"] != nil {
		t.Errorf("validated is stored %v after its window passed; want Succeeded (no provisioningState)", eg)
	}
	eventually(t, 20*time.Second, "validated Succeeded on b and c", func() bool { return all(states("validated", b, cn), router.StateSucceeded) })
	mu.Lock()
	defer mu.Unlock()
	if closed["validated"] != 0 {
		t.Errorf("the window of validated was closed %d times after it was validated; want never", closed["validated"])
	}
}

// A validationUrl fetched on a node that has not heard yet that another node closed the
// window is refused (ErrValidationURLUnknown) and writes nothing: the subscription stays
// Failed, and the node reads it again from the store. The node used to write Succeeded over
// the Failed record.
func TestValidationURLAfterTheWindowClosedElsewhere(t *testing.T) {
	hook := &windowHook{}
	c := manualCluster(t, hook)
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := a.r.CreateSubscription(ctx, "orders", "late", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "late awaiting validation on b", func() bool {
		return all(states("late", b), router.StateAwaitingManualAction)
	})
	// The record the node holding the duty writes as it closes the window.
	rec, egrid := storedRecord(t, a, "late")
	putRecord(t, a, "late", rec, map[string]any{"provisioningState": router.StateFailed, "handshake": egrid["handshake"], "message": "validation failed"})

	err := b.r.CompleteValidation(ctx, "late", hook.token(t, "late"))
	if !errors.Is(err, router.ErrValidationURLUnknown) {
		t.Errorf("validationUrl fetched on b after the window closed on another node: %v; want ErrValidationURLUnknown", err)
	}
	if _, eg := storedRecord(t, a, "late"); eg["provisioningState"] != router.StateFailed {
		t.Errorf("late is stored %v; want it Failed still", eg)
	}
	// b reads the record again at once and tells a, but both are best effort (a store read
	// that fails under load, a notice lost): what the nodes promise is the next full read of
	// the definitions, every 10 placement rounds of a fifth of the lease TTL (15 s here), so
	// the wait covers one full read period and a margin.
	eventually(t, 45*time.Second, "late Failed on a and b", func() bool { return all(states("late", a, b), router.StateFailed) })
}

// failedSubscription creates topic "orders" through a and puts into the store the record a
// node writes when the validation window of its subscription "sub" closes, then waits until
// every node of known holds it Failed.
func failedSubscription(t *testing.T, a *node, known ...*node) {
	t.Helper()
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(struct {
		router.SubscriptionSpec
		Egrid map[string]string `json:"egrid"`
	}{router.SubscriptionSpec{Destination: router.SinkDestination("hook")}, map[string]string{"provisioningState": router.StateFailed, "message": "validation failed"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.st.PutSubscription(ctx, "orders", "sub", raw); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the Failed subscription known on every node", func() bool {
		for _, n := range known {
			if p, err := n.r.Provisioning("orders", "sub"); err != nil || p.State != router.StateFailed {
				return false
			}
		}
		return true
	})
}

// A subscription whose validation failed gets no events, so in cluster mode too it holds
// none: the journal is trimmed past it, where its cursor, left where it failed, held every
// later event (and the stream's disk) for as long as nobody updated or deleted it.
func TestJournalIsTrimmedPastAFailedValidationInCluster(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	failedSubscription(t, a, a, b)
	ids := make([]string, 1100) // past the trimmer's step: a look at once
	for i := range ids {
		ids[i] = fmt.Sprintf("e%d", i)
	}
	if err := publish(t, a.r, "orders", ids...); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the journal trimmed past the Failed subscription", func() bool {
		got, err := a.st.Read(ctx, "orders", 1, 1)
		return err == nil && len(got) == 0
	})
}

// markingStore records, for subscription "sub", the records written (whether each carries the
// revalidating mark) and the state updates that reset its cursor, in order.
type markingStore struct {
	*jetstream.Store
	mu     sync.Mutex
	writes []string
}

func (s *markingStore) note(w string) {
	s.mu.Lock()
	s.writes = append(s.writes, w)
	s.mu.Unlock()
}

func (s *markingStore) PutSubscription(ctx context.Context, topic, sub string, spec []byte) error {
	s.noteRecord(sub, spec)
	return s.Store.PutSubscription(ctx, topic, sub, spec)
}

// CreateSubscription: a create writes the record of a subscription found absent with it.
func (s *markingStore) CreateSubscription(ctx context.Context, topic, sub string, spec []byte) error {
	s.noteRecord(sub, spec)
	return s.Store.CreateSubscription(ctx, topic, sub, spec)
}

// SwapSubscription: an update writes the record it replaces with a swap from the stored one.
func (s *markingStore) SwapSubscription(ctx context.Context, topic, sub string, old, spec []byte) error {
	s.noteRecord(sub, spec)
	return s.Store.SwapSubscription(ctx, topic, sub, old, spec)
}

func (s *markingStore) noteRecord(sub string, spec []byte) {
	if sub != "sub" {
		return
	}
	var rec struct {
		Egrid struct {
			State        string `json:"provisioningState"`
			Revalidating bool   `json:"revalidating"`
		} `json:"egrid"`
	}
	_ = json.Unmarshal(spec, &rec)
	s.note(fmt.Sprintf("record %s revalidating=%v", cmp.Or(rec.Egrid.State, router.StateSucceeded), rec.Egrid.Revalidating))
}

func (s *markingStore) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if sub == "sub" && u.Probation != nil && len(u.Probation) == 0 {
		s.note("reset")
	}
	return s.Store.UpdateSubscription(ctx, topic, sub, u)
}

func (s *markingStore) recorded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

// An update that validates a Failed subscription again marks its stored record before it
// resets the subscription's delivery state: the other nodes' trimmers, which leave a Failed
// subscription's cursor out, count it again from then on, so none of them trims past the
// journal's end the reset reads.
func TestRevalidationMarksTheRecordBeforeTheReset(t *testing.T) {
	c := newCluster(t)
	var ms *markingStore
	c.configure = func(name string, _ *router.Config, deps *router.Deps) {
		if name == "b" {
			ms = &markingStore{Store: deps.Store.(*jetstream.Store)}
			deps.Store = ms
		}
	}
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	failedSubscription(t, a, b)
	if err := b.r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
		t.Fatalf("updating the Failed subscription on b: %v", err)
	}
	want := []string{"record Failed revalidating=true", "reset", "record Succeeded revalidating=false"}
	if got := ms.recorded(); !slices.Equal(got, want) {
		t.Errorf("writes of the update: %q; want %q", got, want)
	}
}
