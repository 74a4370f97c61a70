package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/egress"
	"github.com/egridio/egrid/sinks/webhook"
)

// Egress of WebHook destinations (SPEC §9). Two checks guard where a webhook may point:
//
//   - At create and update ([Router.CreateSubscription], the admin API, the YAML config), an
//     http:// endpoint is refused under [Config.RequireHTTPS], and the egress policy
//     ([Deps.Egress]) judges the endpoint before any connection is made — validation
//     handshake included —, so a denied endpoint never sees a packet and the error (naming
//     the rule) says nothing about what listens there.
//   - At every connection the router's HTTP client dials through the policy, which judges the
//     address after DNS resolution. A denied attempt is InvalidDestination; subscriptions
//     stored before the policy changed are caught there, and an http:// endpoint under
//     RequireHTTPS fails the same way without a request.
//
// With a [Deps.HTTPClient] of its own, the router cannot see the connections: the create-time
// check then judges IP literals and host patterns without a lookup, and the client's dialer
// is the caller's to guard (egress.Policy.DialContext fits http.Transport.DialContext).

// egressRuntime is the router's egress wiring, fixed by New.
type egressRuntime struct {
	dials      bool // the router's client dials through Deps.Egress: names are resolved at create time
	ownsClient bool // the client was made for this router: Close closes its idle connections
}

// defaultEgress is the library default policy (egress.Config's zero value: link-local,
// private and unique-local denied, loopback allowed) and a client dialling through it, shared
// by every router that brings neither, as webhook.SharedClient is.
var defaultEgress = sync.OnceValues(func() (*egress.Policy, *http.Client) {
	p, err := egress.New(egress.Config{}, egress.Options{})
	if err != nil {
		panic(err) // the zero Config is valid
	}
	return p, webhook.NewClient(p.DialContext)
})

// setupEgress fills in Deps.Egress and Deps.HTTPClient. Called by New.
func (r *Router) setupEgress() {
	r.egress.dials = r.deps.HTTPClient == nil
	switch {
	case r.deps.Egress == nil && r.deps.HTTPClient == nil:
		r.deps.Egress, r.deps.HTTPClient = defaultEgress()
	case r.deps.Egress == nil:
		r.deps.Egress, _ = defaultEgress()
	case r.deps.HTTPClient == nil:
		r.deps.HTTPClient = webhook.NewClient(r.deps.Egress.DialContext)
		r.egress.ownsClient = true
	}
}

// closeEgress releases the connections of a client made for this router. Called by Close.
func (r *Router) closeEgress() {
	if r.egress.ownsClient {
		r.deps.HTTPClient.CloseIdleConnections()
	}
}

// isWebHook reports whether spec delivers to a WebHook.
func isWebHook(spec *SubscriptionSpec) bool {
	return strings.EqualFold(spec.Destination.EndpointType, EndpointWebHook)
}

// isHTTP reports whether raw is a plain-http URL.
func isHTTP(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && strings.EqualFold(u.Scheme, "http")
}

// httpRefused is the problem of an http:// endpoint under Config.RequireHTTPS.
const httpRefused = "http:// endpoints are refused, as Azure Event Grid refuses them: use an https:// URL, " +
	"or have the operator allow http (egrid serve: server.allowHttpEndpoints: true or --allow-http-endpoints, or --insecure-dev for local development; " +
	"Go: router.Config.RequireHTTPS false)"

// httpEndpointProblem returns the problem with spec's endpoint scheme, or nil. Pure: it runs
// with the other checks of a create, so every problem is reported at once.
func (r *Router) httpEndpointProblem(spec *SubscriptionSpec) error {
	if !r.refusesHTTP(spec) {
		return nil
	}
	return errors.New("destination.properties.endpointUrl: " + httpRefused)
}

// checkEgress asks the egress policy about a WebHook endpoint before anything connects to it.
// It may resolve the endpoint's name, so it runs without the router's lock.
func (r *Router) checkEgress(ctx context.Context, name string, spec *SubscriptionSpec) error {
	if !isWebHook(spec) {
		return nil
	}
	raw := spec.Destination.Properties.EndpointURL
	var err error
	if r.egress.dials {
		err = r.deps.Egress.CheckURL(ctx, raw)
	} else {
		err = r.deps.Egress.CheckURLNoLookup(raw)
	}
	if err != nil {
		return fmt.Errorf("event subscription %q: destination.properties.endpointUrl: %w", name, err)
	}
	return nil
}

// refusesHTTP reports whether spec is a WebHook subscription whose http:// endpoint gets no
// request from this router ([Config.RequireHTTPS]): one stored before https was required.
// Its deliveries fail without a request (refusedHTTP), and its deletion sends no notice.
func (r *Router) refusesHTTP(spec *SubscriptionSpec) bool {
	return r.cfg.RequireHTTPS && isWebHook(spec) && isHTTP(spec.Destination.Properties.EndpointURL)
}

// refusedHTTP is the sink of a stored http:// subscription under Config.RequireHTTPS: every
// attempt fails as InvalidDestination without a request.
var refusedHTTP = sinks.Func(func(context.Context, *sinks.Batch) error {
	return &sinks.DeliveryError{Outcome: schemas.InvalidDestination, Err: errors.New("endpointUrl: " + httpRefused)}
})
