package cluster_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
)

// deafStore is a node's store whose listing of the topics fails while deaf is set: the
// node's read of the definitions on another node's notice fails, as when the notice is lost
// or late, and it learns of the change only from its next full read (every 30 s here) or a
// lookup. refused receives a value at each listing it failed.
type deafStore struct {
	store.Store
	deaf    atomic.Bool
	refused chan struct{}
}

func (s *deafStore) Topics(ctx context.Context) ([]store.Definition, error) {
	if s.deaf.Load() {
		select {
		case s.refused <- struct{}{}:
		default:
		}
		return nil, errors.New("deaf for the test")
	}
	return s.Store.Topics(ctx)
}

// Behind one public URL the endpoint's GET of its validationUrl may reach another node than
// the one that ran the handshake, before that node heard of the subscription stored
// AwaitingManualAction. That node looks the validation up in the store and completes it: the
// subscription becomes Succeeded on every node and delivers. It used to answer "validation
// URL unknown, used or expired" (404), and the subscription failed when its window closed.
func TestValidationURLFetchedOnANodeThatHasNotHeard(t *testing.T) {
	hook := &windowHook{}
	a, b, deaf := startWithDeafB(t, hook)
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "orders known on b", func() bool {
		_, err := b.r.Subscriptions("orders")
		return err == nil
	})
	deaf.deaf.Store(true)
	if err := a.r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}); err != nil {
		t.Fatal(err)
	}
	if _, eg := storedRecord(t, a, "sub"); eg["provisioningState"] != router.StateAwaitingManualAction {
		t.Fatalf("sub is stored %v; want AwaitingManualAction", eg)
	}
	select {
	case <-deaf.refused: // b's read on a's notice
	case <-time.After(20 * time.Second):
		t.Fatal("b did not read the definitions on a's notice")
	}
	if _, err := b.r.Provisioning("orders", "sub"); !errors.Is(err, router.ErrSubscriptionNotFound) {
		t.Fatalf("sub on b before the GET: %v; want it unknown there (b has not heard of it)", err)
	}
	deaf.deaf.Store(false)

	token := hook.token(t, "sub")
	if err := b.r.CompleteValidation(ctx, "sub", token+"x"); !errors.Is(err, router.ErrValidationURLUnknown) {
		t.Errorf("a wrong token on b: %v; want ErrValidationURLUnknown", err)
	}
	if err := b.r.CompleteValidation(ctx, "sub", token); err != nil {
		t.Fatalf("validationUrl fetched on b after a stored sub AwaitingManualAction: %v; want it validated", err)
	}
	if _, eg := storedRecord(t, a, "sub"); eg["provisioningState"] != nil || eg["tokenHash"] != nil {
		t.Errorf("sub is stored %v after the GET; want Succeeded (no provisioningState, no token hash)", eg)
	}
	if err := b.r.CompleteValidation(ctx, "sub", token); !errors.Is(err, router.ErrValidationURLUnknown) {
		t.Errorf("the validationUrl fetched again on b: %v; want ErrValidationURLUnknown (used)", err)
	}
	if err := a.r.CompleteValidation(ctx, "sub", token); !errors.Is(err, router.ErrValidationURLUnknown) {
		t.Errorf("the validationUrl fetched again on a: %v; want ErrValidationURLUnknown (used)", err)
	}
	eventually(t, 20*time.Second, "sub Succeeded on a and b", func() bool { return all(states("sub", a, b), router.StateSucceeded) })
	if err := publish(t, a.r, "orders", "e1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "e1 delivered to sub", func() bool { return hook.got("e1") })
}

// Likewise for a node that knows the subscription, but not its latest validation: an update
// on another node validated it again, and its notice did not reach this node.
func TestValidationURLOfAnUpdateFetchedOnANodeThatHasNotHeard(t *testing.T) {
	hook := &windowHook{}
	a, b, deaf := startWithDeafB(t, hook)
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}
	if err := a.r.CreateSubscription(ctx, "orders", "sub", spec); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "sub awaiting validation on b", func() bool {
		return all(states("sub", b), router.StateAwaitingManualAction)
	})
	old := hook.token(t, "sub")
	deaf.deaf.Store(true)
	if err := a.r.CreateSubscription(ctx, "orders", "sub", spec); err != nil { // the update: a new validation
		t.Fatal(err)
	}
	select {
	case <-deaf.refused:
	case <-time.After(20 * time.Second):
		t.Fatal("b did not read the definitions on a's notice")
	}
	deaf.deaf.Store(false)
	token := hook.token(t, "sub")
	if token == old {
		t.Fatal("the update sent the validationUrl of the create; want a new one")
	}
	if err := b.r.CompleteValidation(ctx, "sub", token); err != nil {
		t.Fatalf("the update's validationUrl fetched on b, which knew only the create's: %v; want it validated", err)
	}
	if err := b.r.CompleteValidation(ctx, "sub", old); !errors.Is(err, router.ErrValidationURLUnknown) {
		t.Errorf("the create's validationUrl, replaced by the update's: %v; want ErrValidationURLUnknown", err)
	}
	eventually(t, 20*time.Second, "sub Succeeded on a and b", func() bool { return all(states("sub", a, b), router.StateSucceeded) })
	if err := publish(t, a.r, "orders", "e1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "e1 delivered to sub", func() bool { return hook.got("e1") })
}

// startWithDeafB starts nodes a and b of a manually validating cluster, b's store wrapped in a
// deafStore (its topic reads can be made to fail, as a lost notice would leave b).
func startWithDeafB(t *testing.T, hook *windowHook) (a, b *node, deaf *deafStore) {
	t.Helper()
	c := manualCluster(t, hook)
	deaf = &deafStore{refused: make(chan struct{}, 1)}
	configure := c.configure
	c.configure = func(name string, cfg *router.Config, deps *router.Deps) {
		configure(name, cfg, deps)
		if name == "b" {
			deaf.Store = deps.Store
			deps.Store = deaf
		}
	}
	return c.start("a"), c.start("b"), deaf
}
