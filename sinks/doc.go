// Package sinks defines the delivery contract between a subscription actor and a destination:
// [Sink], the [Batch] it delivers and the typed [DeliveryError] it reports. Sinks report facts
// (an HTTP status, a refused connection, a Retry-After header); they never decide to retry or
// give up — that is policy, and lives in router/retry.
//
// Concrete sinks live in subpackages: sinks/webhook (HTTP push), sinks/broker (watermill
// publishers). A plain Go function is a sink through [Func].
//
// [Classify] names the outcome of a failed attempt that got no readable answer (the caller's
// context, name resolution, TLS, the socket) the same way for every sink; each sink adds its
// own failures and untyped error texts to it, and every one of its paths calls it.
//
// [HeaderMappings] are a destination's custom delivery headers (Event Grid's delivery
// attribute mappings, SPEC §2.4): static values, or dynamic ones read from the event, checked
// by [HeaderMappings.Validate] and resolved per batch by [HeaderMappings.Resolve]. Static
// values may be secrets: no message or String method of this package prints them.
//
// A failure that is one event's own fault — it cannot be encoded, or a delivery header cannot
// be built from it — is an *[UnsendableError] naming the events: the subscription ends those
// alone and sends the rest, never blaming the destination. The protocol headers and body
// encodings themselves are Event Grid's wire format and live in schemas
// ([schemas.DeliveryHeaders], [schemas.Encoding]); every sink builds its requests with them.
//
// [ObjectStore] is the other contract here: where dead letters are written (one object per
// subscription per flush). sinks/blob implements it on MinIO; the test kit has an in-memory one
// and a fault-injecting one, and testkit/sinktest runs one conformance suite on all of them.
//
// sinks imports only schemas.
package sinks
