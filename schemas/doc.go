// Package schemas owns egrid's wire formats: Event Grid schema events, CloudEvents 1.0
// (structured single, batch and binary mode), their validation, the stamping of `topic` and
// `metadataVersion`, the encoding of a delivery batch and the Event Grid → CloudEvents
// conversion. It also holds the Event Grid wire vocabulary (outcomes, reasons, header names) as
// named constants, so every package speaks one language.
//
// A topic decodes a publish into []*[Event]: the envelope fields the router routes and filters
// on, plus the event's JSON object as it will be delivered in its input schema. Encoding picks
// the body and Content-Type for a subscription's delivery schema.
//
// # Decoding a publish
//
// One decoder per input schema: [DecodeEventGrid], [DecodeCloudEvents] (structured single or
// batch), [DecodeCloudEventBinary] (binary mode) and [DecodeCustom] (with an [InputMapping]).
// [DecodeEventGridObjectOrArray] and [DecodeCustomObjectOrArray] also take one event object,
// for messages a broker source reads; the publish API of those schemas takes arrays only.
// Each validates the whole request against [Limits] in one pass over the bytes, with a small
// strict JSON scanner rather than encoding/json: no maps, no reflection, and every value's
// published bytes are kept, so an event's data is delivered exactly as it was sent. A publish
// is all or nothing (SPEC §1.1): a decoder returns either every event or an error and no
// events. Errors are data an HTTP front end turns into an answer:
//
//   - *[TooLargeError]: 413, the request or one event is over its byte limit;
//   - *[TooManyEventsError]: 400, too many events in one request;
//   - *[ValidationError]: 400, one per problem, naming the event index and field; several are
//     joined with errors.Join (at most 20 per request) and [ValidationErrors] lists them.
//
// Decisions where Event Grid's documents are silent or disagree (SPEC §4, §8; each decoder's
// comment has the details):
//
//   - Event Grid schema data may be JSON null (it counts as present); optional members sent as
//     null count as absent; a known member sent twice is refused; member names are
//     case-sensitive, and a "missing" member that was sent in another case says so.
//   - Strings must be valid UTF-8 (encoding/json would silently replace bad bytes).
//   - The per-event limit counts the bytes the event takes in the request as published.
//   - Fields egrid copies into delivery headers (id, dataVersion, traceparent; for custom
//     schemas the mapped source fields) must hold no control character and at most 1024
//     bytes: an event that could never be delivered is not accepted (SPEC §8).
//   - A mapped custom-schema eventType is required: an event that ends up without one is
//     refused, and [InputMapping.Validate] refuses a mapping that can give none.
//
// # Encoding a delivery
//
// [EncodeBatch] builds one delivery body from events of one input schema in a subscription's
// delivery schema, following the conversion matrix of [CanDeliver]; [MetadataVersion] gives its
// aeg-metadata-version header. It appends to a caller-owned buffer and parses nothing except
// to find data in an Event Grid → CloudEvents conversion.
//
// # One delivery request
//
// Every rule of Event Grid's delivery wire lives here, so the webhook and broker sinks (and the
// webhook's validation handshake) build the same request: [Encoding] gives a request's body
// with the CloudEvents batch framing ([Encoding.AppendBatch]) or one event alone, as a broker
// message carries it ([Encoding.AppendEvent]); [DeliveryHeaders] gives its protocol headers
// (aeg-*, Content-Type, and a CloudEvent's W3C trace context as traceparent and tracestate:
// tracecontext.go). They are here rather than in sinks because they are
// Event Grid's wire format, like the event encodings, and not the delivery contract: sinks
// holds what a destination is (the Sink interface, the Batch, custom header mappings), schemas
// what goes over the wire. Header-bound fields (id, dataVersion, traceparent) are refused at
// publish when they could never be sent ([HeaderValueProblem], [MaxIDBytes]); an event stored
// before that check gives an *[EncodeError] or *[HeaderError], which sinks report so that the
// event ends alone ([UndeliverableDueToEventContent]).
//
// schemas is pure: it imports no other egrid package, does no I/O and never reads the clock
// ([DecodeCustom] takes now and an id generator).
package schemas
