package broker

import (
	"errors"
	"strings"

	"github.com/lib/pq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// classify names the outcome of a publish that failed (SPEC §2.1's vocabulary, so the retry
// policy and probation apply to brokers as to webhooks), with [sinks.Classify]: the caller's
// context first, then the broker's answers (JetStream API errors, AMQP and PostgreSQL codes,
// Redis error prefixes) before the transport errors they may wrap, then the network, then the
// publishers' untyped errors. err is the publisher's error; parent is the caller's ctx.Err()
// when the attempt ended, nil while the caller's ctx is live.
func classify(err, parent error) schemas.Outcome {
	return sinks.Classify(err, parent, brokerOutcome, untypedErrors)
}

// brokerOutcome reads the errors of the brokers and their clients; it reports false for any
// other error.
func brokerOutcome(err error) (schemas.Outcome, bool) {
	var (
		apiErr   *jetstream.APIError
		amqpErr  *amqp.Error
		pqErr    *pq.Error
		sqlState interface{ SQLState() string }
		redisErr interface{ RedisError() }
	)
	var (
		tooLarge *TooLargeError
		noAnswer *noAnswerError
		pgTable  *pgTableError
	)
	switch {
	case errors.As(err, &pgTable) && pgTable.raced():
		return schemas.Busy, true
	case errors.As(err, &tooLarge):
		return schemas.PayloadTooLarge, true
	case errors.As(err, &noAnswer) && noAnswer.closing:
		return schemas.Canceled, true
	case errors.As(err, &noAnswer):
		return schemas.TimedOut, true

	// NATS and JetStream.
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrStreamNotFound):
		// No stream captures the subject: the destination does not exist.
		return schemas.NotFound, true
	case errors.As(err, &apiErr):
		return jetStreamOutcome(apiErr), true
	case errors.Is(err, nats.ErrMaxPayload):
		return schemas.PayloadTooLarge, true
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrSlowConsumer):
		return schemas.Busy, true
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked):
		return schemas.Unauthorized, true
	case errors.Is(err, nats.ErrTimeout):
		return schemas.TimedOut, true
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrStaleConnection):
		return schemas.SocketError, true

	// RabbitMQ.
	case errors.As(err, &amqpErr):
		return amqpOutcome(amqpErr), true
	case errors.Is(err, amqp.ErrClosed):
		return schemas.SocketError, true

	// PostgreSQL: lib/pq's errors carry the SQLSTATE, other drivers' (pgx) report it.
	case errors.As(err, &pqErr):
		return sqlStateOutcome(string(pqErr.Code)), true
	case errors.As(err, &sqlState):
		return sqlStateOutcome(sqlState.SQLState()), true

	// Redis: the server's answer starts with an error code word.
	case errors.As(err, &redisErr):
		if e, ok := redisErr.(error); ok {
			return redisOutcome(e.Error()), true
		}
		return schemas.GenericError, true
	}
	return 0, false
}

// jetStreamOutcome reads a JetStream API error: its code is HTTP-like.
func jetStreamOutcome(e *jetstream.APIError) schemas.Outcome {
	d := strings.ToLower(e.Description)
	switch {
	case strings.Contains(d, "maximum messages exceeded"), strings.Contains(d, "maximum bytes exceeded"),
		strings.Contains(d, "insufficient resources"), strings.Contains(d, "maximum messages per subject exceeded"):
		return schemas.Full
	case strings.Contains(d, "message size exceeds maximum"):
		return schemas.PayloadTooLarge
	}
	switch e.Code {
	case 404:
		return schemas.NotFound
	case 408:
		return schemas.TimedOut
	case 413:
		return schemas.PayloadTooLarge
	case 429, 503:
		return schemas.Busy
	case 401:
		return schemas.Unauthorized
	case 403:
		return schemas.Forbidden
	case 400:
		return schemas.BadRequest
	}
	return schemas.GenericError
}

// amqpOutcome reads an AMQP 0-9-1 reply code (RabbitMQ's channel and connection exceptions).
func amqpOutcome(e *amqp.Error) schemas.Outcome {
	switch {
	case e.Code == amqp.ContentTooLarge,
		// RabbitMQ refuses a message over its max_message_size with a channel exception:
		// "PRECONDITION_FAILED - message size 2000 is larger than configured max size 1000"
		// ("larger than max size" when the limit is RabbitMQ's own, 512 MiB).
		e.Code == amqp.PreconditionFailed && rabbitMQMaxSize.MatchString(e.Reason):
		return schemas.PayloadTooLarge
	}
	switch e.Code {
	case amqp.ContentTooLarge:
		return schemas.PayloadTooLarge
	case amqp.NoRoute, amqp.NotFound:
		return schemas.NotFound
	case amqp.AccessRefused:
		return schemas.Forbidden
	case amqp.ResourceLocked, amqp.ResourceError:
		return schemas.Busy
	case amqp.PreconditionFailed, amqp.NotAllowed:
		return schemas.InvalidDestination
	case amqp.ConnectionForced, amqp.FrameError, amqp.SyntaxError, amqp.CommandInvalid,
		amqp.ChannelError, amqp.UnexpectedFrame, amqp.InternalError:
		return schemas.SocketError
	}
	if e.Server {
		return schemas.GenericError
	}
	return schemas.SocketError // a client-side close: the connection or channel is gone
}

// sqlStateOutcome reads a PostgreSQL SQLSTATE.
func sqlStateOutcome(code string) schemas.Outcome {
	switch code {
	case "53300", "40001", "40P01", "55P03", "57P03": // too many connections, serialization,
		return schemas.Busy // deadlock, lock not available, cannot connect now
	case "57014": // query_canceled (statement_timeout)
		return schemas.TimedOut
	case "57P01", "57P02": // admin or crash shutdown
		return schemas.SocketError
	case "42P01", "3F000", "3D000": // undefined table, schema, database
		return schemas.NotFound
	case "42501":
		return schemas.Forbidden
	case "54000":
		return schemas.PayloadTooLarge
	}
	switch {
	case strings.HasPrefix(code, "08"): // connection exception
		return schemas.SocketError
	case strings.HasPrefix(code, "53"): // insufficient resources: disk full, out of memory
		return schemas.Full
	case strings.HasPrefix(code, "28"): // invalid authorization
		return schemas.Unauthorized
	case strings.HasPrefix(code, "22"), strings.HasPrefix(code, "23"): // data exception, constraint
		return schemas.BadRequest
	}
	return schemas.GenericError
}

// redisOutcome reads the error code word a Redis error reply starts with.
func redisOutcome(msg string) schemas.Outcome {
	word, _, _ := strings.Cut(msg, " ")
	switch word {
	case "LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "MOVED", "ASK":
		return schemas.Busy
	case "OOM":
		return schemas.Full
	case "NOAUTH", "WRONGPASS":
		return schemas.Unauthorized
	case "NOPERM":
		return schemas.Forbidden
	case "WRONGTYPE":
		return schemas.InvalidDestination
	}
	return schemas.GenericError
}

// untypedErrors are publisher failures returned as untyped errors, so their text is all there
// is to recognise them by.
var untypedErrors = []sinks.ErrorText{
	{Text: "permissions violation", Outcome: schemas.Forbidden},          // NATS: the user may not publish there
	{Text: "not connected to AMQP", Outcome: schemas.SocketError},        // watermill-amqp while reconnecting
	{Text: "pub/sub is connection closed", Outcome: schemas.SocketError}, // watermill-amqp after Close
	{Text: "publisher is closed", Outcome: schemas.SocketError},          // watermill-sql after Close
	{Text: "publisher closed", Outcome: schemas.SocketError},             // watermill-redisstream after Close
	{Text: "Pub/Sub closed", Outcome: schemas.SocketError},               // gochannel after Close
	{Text: "redis: client is closed", Outcome: schemas.SocketError},
	{Text: "sql: database is closed", Outcome: schemas.SocketError},
	{Text: "driver: bad connection", Outcome: schemas.SocketError},
}
