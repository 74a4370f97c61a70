package webhook

import (
	"errors"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// classify names the outcome of an attempt that got no HTTP response (SPEC §2.1): the caller's
// context, then the network, then net/http's untyped errors (see [sinks.Classify]). err is the
// client's error; parent is the caller's ctx.Err() when the attempt ended, nil while the
// caller's ctx is live. A failure only the webhook sink can meet, a refusal of the egress policy,
// is read by [ownOutcome] before the network errors it arrives wrapped in: the address can never
// be reached while the policy stands, so it is InvalidDestination.
func classify(err, parent error) schemas.Outcome {
	return sinks.Classify(err, parent, ownOutcome, untypedErrors)
}

// ownOutcome names the failures of the webhook sink's own making: an address the egress policy
// ([sinks.ErrDestinationDenied]) refused.
func ownOutcome(err error) (schemas.Outcome, bool) {
	if errors.Is(err, sinks.ErrDestinationDenied) {
		return schemas.InvalidDestination, true
	}
	return 0, false
}

// untypedErrors are net/http failures that are returned as unexported, untyped errors, so
// their text is all there is to recognise them by.
var untypedErrors = []sinks.ErrorText{
	// The connection was closed before a response arrived (a fresh one, or one from the pool).
	{Text: "http: server closed idle connection", Outcome: schemas.SocketError},
	// A plain-HTTP server behind an https URL: the TLS handshake cannot succeed.
	{Text: "http: server gave HTTP response to HTTPS client", Outcome: schemas.SocketError},
	// URLs no request can be sent to ([New] refuses them; a client's own transport may not).
	{Text: "unsupported protocol scheme", Outcome: schemas.InvalidDestination},
	{Text: "http: no Host in request URL", Outcome: schemas.InvalidDestination},
}
