// Package sinks defines the delivery contract between a subscription actor and a destination:
// [Sink], the [Batch] it delivers and the typed [DeliveryError] it reports. Sinks report facts
// (an HTTP status, a refused connection, a Retry-After header); they never decide to retry or
// give up — that is policy, and lives in router/retry.
//
// Concrete sinks live in subpackages: sinks/webhook (HTTP push), sinks/broker (watermill
// publishers). A plain Go function is a sink through [Func].
//
// sinks imports only schemas.
package sinks
