// Package webhook is egrid's HTTP push sink: it POSTs a [sinks.Batch] to one endpoint URL the
// way Azure Event Grid delivers to a WebHook destination, and reports what happened as facts.
//
// The model: one [Sink] per destination URL, immutable after [New] and safe for concurrent
// use. Each [Sink.Deliver] is one attempt: a single POST with the batch's encoded body and
// Event Grid's delivery headers (SPEC §2.4), bounded by the attempt timeout (SPEC §2.1, 30 s
// by default). The sink never retries, waits or gives up; router/retry decides that from the
// *[sinks.DeliveryError] it returns:
//
//   - 200-204 is success (nil).
//   - Any other HTTP status is classified by [schemas.OutcomeForStatus], with StatusCode set
//     and, on 429 and 503, the Retry-After header passed on verbatim.
//   - No response is classified by cause (SPEC §2.1) with [sinks.Classify], as for every
//     sink, plus net/http's untyped errors: the attempt timeout or a network
//     timeout is TimedOut; a failed name lookup is ResolutionError; a refused or reset
//     connection, an early EOF or a failed TLS handshake or certificate check is SocketError;
//     an address the request can never reach (a TLS certificate for another name, an invalid
//     address) is InvalidDestination, and so is an address the egress policy refused
//     ([sinks.ErrDestinationDenied], from a client made by [NewClient] with
//     sinks/egress's dialer); the caller's cancelled ctx is Canceled (its deadline,
//     TimedOut).
//
// Decisions where Event Grid is silent:
//   - Redirects are not followed by the shared client: a 3xx is a failure (GenericError with
//     its StatusCode), since Event Grid counts only 200-204 as delivered (SPEC §2.1). A client
//     passed to [New] keeps its own redirect policy.
//   - Custom delivery headers (Batch.Headers) never replace the protocol headers
//     (aeg-*, Content-Type, traceparent, tracestate); a custom header whose name or value is not valid
//     HTTP is dropped, as Event Grid drops non-conformant header values on webhook deliveries
//     (eventgrid-behaviour.md §3.4).
//   - Error messages name the endpoint without its query string and user info, because Event
//     Grid users put secrets there (eventgrid-behaviour.md §5.1).
//   - The response body is read up to 64 KB and discarded so the connection is reused; a
//     longer body ends the connection instead, without reading the rest of it, however it is
//     delimited (chunked, Content-Length, the connection's end; over HTTP/2 the stream is
//     reset): the attempt ends there, not at its timeout. The answer's head (status line and headers,
//     informational answers included) is read up to 64 KiB: a longer one fails the attempt
//     (GenericError) rather than being parsed into memory, where net/http's default would
//     read 10 MiB.
//
// Custom delivery headers ([Config].Headers) are resolved per request: static values as
// configured, dynamic ones from the batch's first event. A rate cap ([Config].
// MaxRequestsPerMinute, from a CloudEvents endpoint's WebHook-Allowed-Rate) spaces requests
// evenly; Deliver waits for its turn, honouring ctx, before the attempt timeout starts.
//
// Endpoint validation (SPEC §2.5) is two single-attempt functions whose retry policy is the
// caller's: [ValidateSubscription] sends the Event Grid SubscriptionValidationEvent and reads
// the echoed code (or its absence: manual validation), and [RequestDelivery] performs the
// CloudEvents OPTIONS abuse-protection handshake and returns the allowed rate. Both report a
// refusal as a *[HandshakeError] whose message names the endpoint without its query string.
//
// The client: [SharedClient] and the clients [NewClient] makes send a plain-http request
// with a body of at most 16 KiB, and no proxy for its URL, on the caller's goroutine over
// keep-alive connections of their own, with no goroutine hand-off (about half the client's
// CPU per delivery; see the README's benchmark notes). The request and the answer are the
// bytes net/http writes and reads: the shapes nearly all of them have are written and read by
// the package's own code, held to [http.Request.Write] and [http.ReadResponse] by tests that
// compare the two (fuzz targets included), and every other shape by those functions. A connection idle for a second or
// more is looked at before use (a peek that does not wait), so one the endpoint closed while
// it was idle is dropped, not written to. One closed as the request goes out fails before
// any byte of an answer; the request is then sent once more on a new connection, which may
// duplicate a request the endpoint read and dropped without answering, as Event Grid's
// at-least-once delivery allows.
// Everything else (https with HTTP/2 and TLS, proxied URLs, larger bodies, which net/http
// writes while it already reads an early answer) goes through net/http's Transport.
//
// Buffers: Deliver does not read b.Body after it returns, even when the endpoint answers
// before it has read the whole request (net/http may keep writing the body in the
// background). A body the direct path sends is written whole, resends included, before
// Deliver returns, so it goes from b.Body itself. Any other body up to 64 KB is sent from a
// copy the request owns, behind a *bytes.Reader, which also lets net/http write headers and
// body in one write; a larger one is read through a guard that the sink cuts off when
// Deliver returns.
//
// webhook imports only sinks and schemas from egrid.
package webhook
