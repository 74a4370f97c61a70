package webhook_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/egress"
	"github.com/egridio/egrid/sinks/webhook"
)

// TestDeliverDeniedByEgressPolicy: with a client whose dialer is an egress policy, an attempt
// to a denied address fails as InvalidDestination, names the rule, and sends nothing; the
// validation handshake is refused the same way and is not worth a retry.
func TestDeliverDeniedByEgressPolicy(t *testing.T) {
	srv, seen := captureServer(t)
	p, err := egress.New(egress.Config{DenyLoopback: true}, egress.Options{ConfigPath: "server.egress"})
	if err != nil {
		t.Fatal(err)
	}
	client := webhook.NewClient(p.DialContext)
	defer client.CloseIdleConnections()
	s := newSink(t, webhook.Config{URL: srv.URL + "/hook?code=s3cret"}, client)
	err = s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
	de := requireOutcome(t, err, schemas.InvalidDestination)
	if !strings.Contains(de.Error(), `egress rule "loopback is denied; allow with server.egress.allow: [127.0.0.0/8]"`) || strings.Contains(de.Error(), "s3cret") {
		t.Fatalf("Deliver error %q: want the rule named and no query string", de)
	}

	_, err = webhook.ValidateSubscription(context.Background(), client, webhook.ValidationRequest{URL: srv.URL + "/hook", Subscription: "s", Code: "c"})
	var he *webhook.HandshakeError
	if !errors.As(err, &he) || he.Outcome != schemas.InvalidDestination || he.Transient() || !strings.Contains(he.Reason, "loopback is denied") {
		t.Fatalf("ValidateSubscription = %v, want a non-transient InvalidDestination naming the rule", err)
	}

	// The same endpoint through the same policy with loopback allowed is reached: the
	// denial above was the policy's, not the endpoint's.
	open, err := egress.New(egress.Config{DenyLoopback: true, Allow: []string{"127.0.0.1"}}, egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	allowed := webhook.NewClient(open.DialContext)
	defer allowed.CloseIdleConnections()
	if err := newSink(t, webhook.Config{URL: srv.URL + "/hook"}, allowed).Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: []byte(`[]`)}); err != nil {
		t.Fatalf("Deliver with loopback allowed: %v", err)
	}
	if got := <-seen; got.requestURI != "/hook" {
		t.Fatalf("the endpoint first saw %s, want the allowed delivery to /hook (the denied ones must not arrive)", got.requestURI)
	}
}
