// Package broker is egrid's message-broker destination: a [Sink] publishes a subscription's
// events to any watermill [message.Publisher] — NATS JetStream, RabbitMQ, Redis Streams,
// PostgreSQL, an in-process GoChannel, or any other watermill Pub/Sub — with the same retry,
// batching, probation and dead-letter semantics as a webhook. It is Event Grid's Service Bus,
// Event Hubs and Storage Queue destinations, generalised (DESIGN.md §7).
//
// The model: one [Sink] per subscription, wrapping a publisher and a topic (the subject, queue,
// stream or table to publish to). Each [Sink.Deliver] is one attempt, and the sink never
// retries, waits or gives up; router/retry decides that from the *[sinks.DeliveryError] it
// returns.
//
// Messages. Each event of a batch becomes one message ([Messages]):
//   - UUID is the event id, stable across retries and replays, so consumers dedupe by it (on
//     NATS it is also the Nats-Msg-Id, so JetStream drops a republished duplicate within its
//     duplicate window).
//   - The payload is the event alone in the subscription's delivery schema: one JSON object
//     (an Event Grid event, a structured-mode CloudEvent, or the custom object), not a
//     one-element array. A broker message is one event, as Event Grid's Service Bus and
//     Storage Queue messages are; only the webhook body is an array (SPEC §2.3).
//   - The metadata holds the delivery headers of SPEC §2.4 under their lower-case names
//     (aeg-event-type, aeg-subscription-name, aeg-delivery-count, aeg-metadata-version,
//     aeg-data-version for the Event Grid and custom schemas, aeg-output-event-id = the
//     event's id), "content-type", "traceparent" and "tracestate" when the event carries a W3C trace
//     context ([schemas.DeliveryHeaders]), and the
//     subscription's custom delivery headers, which never replace those keys.
//
// All or nothing. A batch (maxEventsPerBatch > 1) is one Publish call of its messages and has
// one outcome (SPEC §2.3): nil only when the publisher accepted every message. A failed batch
// is published again whole on retry, so some of its messages may arrive twice; the UUID says
// which. PostgreSQL inserts a batch in one statement, so there it is atomic.
//
// Outcomes. A publish error is classified by [sinks.Classify], shared with the webhook sink,
// with the brokers' own answers read first (SPEC §2.1's vocabulary): the
// caller's expired context is TimedOut and its cancelled context Canceled; a refused, reset or
// closed connection (and a publisher that is reconnecting) is SocketError; a broker timeout is
// TimedOut; a failed name lookup is ResolutionError; a subject no JetStream stream captures, a
// missing queue or table is NotFound; throttling, flow control, a locked resource or a busy
// server is Busy; a full stream, disk or memory is Full; an oversized message is
// PayloadTooLarge; refused credentials are Unauthorized and missing permissions Forbidden;
// anything else is GenericError.
//
// Messages over a broker's size limit. An event the broker can never take for its size is that
// event's own fault, not the destination's (SPEC §8): Deliver returns an *[sinks.UnsendableError]
// naming it, and the subscription ends it alone (UndeliverableDueToEventContent) and sends the
// rest of its batch again, without counting it against the endpoint or its probation. On NATS the
// server's max_payload (1 MiB by default, while publish accepts events of up to 1 MiB, to which
// the message adds its headers) is checked before anything of the batch is sent (a
// *[TooLargeError]), and a stream's max_msg_size as each message is stored (after the messages before it, which
// the error's Sent counts, and which JetStream drops as duplicates when they are sent again). RabbitMQ's
// max_message_size (on the message body; 128 MiB by default, 16 MiB from RabbitMQ 4) is not told
// to clients: the first message over it is found as RabbitMQ refuses it (closing the channel with
// 406 PRECONDITION_FAILED, the limit in its reason), after the messages of the batch before it
// were stored (the error's Sent counts them, and its message says so), and they arrive twice
// when the rest is sent again; from then on the connection
// knows the limit and checks every batch before sending anything. On PostgreSQL, watermill-sql
// stores the event id in a VARCHAR(36) column: an event whose id is longer is checked before
// anything is inserted (a value is otherwise limited to 1 GB, far over an event's 1 MiB); a
// batch PostgreSQL refuses for the data of a row (a data exception or a constraint, such as a
// CHECK the operator added), which does not say which row, is inserted again row by row in a
// transaction rolled back, to name the events refused alone, nothing stored. On the
// other brokers, a batch of one event that the broker refuses as too large is that event's fault;
// in a batch of several, where the broker does not say which message, the batch fails as
// PayloadTooLarge.
//
// Timeouts. watermill's Publish takes no context. Deliver returns as soon as its context is
// done and leaves the publish to finish in the background with its own copy of the payloads
// (publishers that read a context from the message, AMQP and Redis, stop too); [Sink.Close]
// waits for such publishes, 5 s at most: at 4 s the RabbitMQ publisher cuts the connection of a
// call still waiting for RabbitMQ's answer (which may otherwise take 10 s, and the channel's
// close 10 s more), so the publish ends. The events of a publish cut so are not lost: its
// attempt failed, and the subscription's next incarnation delivers them again.
//
// Connections. [Open] turns the server config's broker settings ([Servers]) into [Brokers]: a
// publisher and a subscriber per configured broker, which dial on first use and dial again after
// losing their connection, so egrid starts while a broker is down and a delivery to it fails as
// SocketError until it is back. A dial (up to 5 s for a server that accepts and does not answer)
// holds nothing the other deliveries need: one dial per broker and direction is in flight at a
// time, the delivery that started it and those that arrive during it wait for it and share its
// outcome (a failed dial fails them all at once, and the next delivery dials again), each for no
// longer than its attempt, and [Brokers.Close] does not wait for it but releases them all at
// once (a dial that ends after Close closes what it opened). A server that accepts connections
// and stops answering holds no attempt past its response timeout, and no connection or
// [Brokers.Close] for good: PostgreSQL connections wait at most 5 s for each read or write while
// they connect and 5 min (the longest response timeout) once connected, and Close cuts them;
// and a publish to PostgreSQL runs its statements (the table's creation and the insert) on a
// connection taken for it alone, with its attempt's context (watermill-sql passes none), and
// that connection is closed when the attempt ends first, so the publish ends then too, saying
// PostgreSQL had not answered (TimedOut), instead of holding the connection until its read bound.
// nats.go writes a published message itself, under its connection's lock and without the
// context, bounded only by its 1-minute write timeout: a NATS server that stops reading held
// the publish, and every other publish of the connection, that long. When a publish's attempt
// ends while a write to its connection is stuck, egrid closes that connection (nats.go
// reconnects), so the publish ends then, saying NATS had not taken the message (TimedOut); the
// wait for the stream's acknowledgement is bounded by the attempt's context.
// RabbitMQ's client (amqp091-go) bounds no wait for the broker's answer, and its heartbeats end
// only a connection that is silent altogether, so egrid bounds each one by 10 s: opening,
// declaring on, configuring and closing a channel, writing a message, its confirm (by the
// message's context too) and closing the connection, and a source's ack or nack of a message
// (a write, which a broker that stops reading holds). A call that passes the bound fails as
// TimedOut, saying what RabbitMQ did not answer, and the connection is cut (but for a confirm
// that does not come, whose channel is closed instead), so the call returns and the next delivery
// dials a new one; a source whose ack or nack is cut so subscribes again on a new connection, and
// RabbitMQ redelivers the message, as it does any unacknowledged on a lost connection. The other
// sources' answers are bounded by their clients: a NATS ack is a buffered write, flushed within
// nats.go's 1-minute write timeout (and JetStream redelivers a message not acked within 30 s);
// a Redis XACK waits at most go-redis's 3 s; a PostgreSQL offset update at most the 5 min each
// read or write of a connection waits.
//
// Each destination on RabbitMQ publishes on a connection of its own (dialled on its first
// delivery, closed with it); the other brokers' destinations share one connection (NATS, Redis)
// or pool (PostgreSQL) per broker. amqp091 cannot give up on a channel whose broker does not
// answer without closing the whole connection, so a RabbitMQ call that hangs is ended by
// cutting its connection, at its 10 s bound or when its destination closes; on a connection of
// its own, that cut ends no other destination's publishes. (A connection counted by its users
// would still be cut for all of them.) The cost is one connection, and its heartbeats, per
// RabbitMQ destination, which RabbitMQ takes in the thousands.
//
// Topology: RabbitMQ queues are declared durable on first publish, and again when a queue deleted
// since returns a message (messages are published mandatory, so one that reaches no queue is
// never confirmed as delivered); Redis streams and PostgreSQL tables are created by the first
// message; NATS subjects must be captured by a JetStream stream the operator created (a subject
// without one is NotFound).
//
// broker imports only sinks and schemas from egrid.
package broker
