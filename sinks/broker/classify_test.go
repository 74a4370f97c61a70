package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/lib/pq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/broker"
)

// redisReply is the error go-redis returns for a server's error reply.
func redisReply(_ *testing.T, reply string) error { return redisError(reply) }

// redisError behaves as go-redis' proto.RedisError (which is internal): an error with a
// RedisError method, the redis.Error interface.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

var _ redis.Error = redisError("")

// TestClassify checks what the broker sinks add to [sinks.Classify] (the brokers' answers and
// the publishers' untyped errors) and, with a few rows, that everything else goes to it; the
// shared cases are in the sinks package's table.
func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name   string
		err    error
		parent error
		want   schemas.Outcome
	}{
		{name: "caller deadline wins", err: refused, parent: context.DeadlineExceeded, want: schemas.TimedOut},
		{name: "caller cancel wins", err: refused, parent: context.Canceled, want: schemas.Canceled},
		{name: "deadline in the chain", err: fmt.Errorf("publish: %w", context.DeadlineExceeded), want: schemas.TimedOut},

		{name: "nats no responders", err: fmt.Errorf("failed to publish: %w", nats.ErrNoResponders), want: schemas.NotFound},
		{name: "jetstream no stream response", err: fmt.Errorf("failed to publish: %w", jetstream.ErrNoStreamResponse), want: schemas.NotFound},
		{name: "jetstream stream not found", err: jetstream.ErrStreamNotFound, want: schemas.NotFound},
		{name: "jetstream 503", err: &jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"}, want: schemas.Busy},
		{name: "jetstream 429", err: &jetstream.APIError{Code: 429, Description: "too many requests"}, want: schemas.Busy},
		{name: "jetstream stream full", err: &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}, want: schemas.Full},
		{name: "jetstream message too big", err: &jetstream.APIError{Code: 400, ErrorCode: 10054, Description: "message size exceeds maximum allowed"}, want: schemas.PayloadTooLarge},
		{name: "jetstream 400", err: &jetstream.APIError{Code: 400, Description: "bad request"}, want: schemas.BadRequest},
		{name: "nats max payload", err: nats.ErrMaxPayload, want: schemas.PayloadTooLarge},
		{name: "nats reconnect buffer", err: nats.ErrReconnectBufExceeded, want: schemas.Busy},
		{name: "nats timeout", err: fmt.Errorf("failed to publish: %w", nats.ErrTimeout), want: schemas.TimedOut},
		{name: "nats disconnected", err: fmt.Errorf("x: %w", nats.ErrDisconnected), want: schemas.SocketError},
		{name: "nats closed", err: nats.ErrConnectionClosed, want: schemas.SocketError},
		{name: "nats no servers", err: nats.ErrNoServers, want: schemas.SocketError},
		{name: "nats authorization", err: nats.ErrAuthorization, want: schemas.Unauthorized},
		{name: "nats permissions", err: errors.New(`nats: permissions violation for publish to "orders"`), want: schemas.Forbidden},

		{name: "amqp closed", err: amqp.ErrClosed, want: schemas.SocketError},
		{name: "amqp connection forced", err: &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - broker forced connection closure", Server: true}, want: schemas.SocketError},
		{name: "amqp content too large", err: &amqp.Error{Code: amqp.ContentTooLarge, Server: true}, want: schemas.PayloadTooLarge},
		{name: "amqp no route", err: &amqp.Error{Code: amqp.NoRoute, Server: true}, want: schemas.NotFound},
		{name: "amqp not found", err: &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no queue", Server: true}, want: schemas.NotFound},
		{name: "amqp access refused", err: &amqp.Error{Code: amqp.AccessRefused, Server: true}, want: schemas.Forbidden},
		{name: "amqp resource error", err: &amqp.Error{Code: amqp.ResourceError, Server: true}, want: schemas.Busy},
		{name: "amqp precondition", err: &amqp.Error{Code: amqp.PreconditionFailed, Server: true}, want: schemas.InvalidDestination},
		{name: "amqp message over max_message_size", err: &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - message size 2000 is larger than configured max size 1000", Server: true}, want: schemas.PayloadTooLarge},
		{name: "over the broker's limit", err: fmt.Errorf("publishing: %w", &broker.TooLargeError{Broker: broker.NATSJetStream, Size: 2, Limit: 1, Setting: "max_payload"}), want: schemas.PayloadTooLarge},
		{name: "watermill amqp reconnecting", err: errors.New("not connected to AMQP"), want: schemas.SocketError},

		{name: "postgres connection failure", err: &pq.Error{Code: "08006"}, want: schemas.SocketError},
		{name: "postgres too many connections", err: &pq.Error{Code: "53300"}, want: schemas.Busy},
		{name: "postgres disk full", err: &pq.Error{Code: "53100"}, want: schemas.Full},
		{name: "postgres statement timeout", err: &pq.Error{Code: "57014"}, want: schemas.TimedOut},
		{name: "postgres shutdown", err: fmt.Errorf("could not insert message as row: %w", &pq.Error{Code: "57P01"}), want: schemas.SocketError},
		{name: "postgres undefined table", err: &pq.Error{Code: "42P01"}, want: schemas.NotFound},
		{name: "postgres auth", err: &pq.Error{Code: "28P01"}, want: schemas.Unauthorized},
		{name: "postgres privilege", err: &pq.Error{Code: "42501"}, want: schemas.Forbidden},
		{name: "postgres serialization", err: &pq.Error{Code: "40001"}, want: schemas.Busy},
		{name: "postgres other", err: &pq.Error{Code: "XX000"}, want: schemas.GenericError},

		{name: "redis loading", err: redisReply(t, "LOADING Redis is loading the dataset in memory"), want: schemas.Busy},
		{name: "redis oom", err: fmt.Errorf("cannot xadd: %w", redisReply(t, "OOM command not allowed when used memory > 'maxmemory'")), want: schemas.Full},
		{name: "redis noauth", err: redisReply(t, "NOAUTH Authentication required."), want: schemas.Unauthorized},
		{name: "redis noperm", err: redisReply(t, "NOPERM this user has no permissions"), want: schemas.Forbidden},
		{name: "redis wrongtype", err: redisReply(t, "WRONGTYPE Operation against a key holding the wrong kind of value"), want: schemas.InvalidDestination},
		{name: "redis other", err: redisReply(t, "ERR unknown command"), want: schemas.GenericError},
		{name: "redis closed", err: redis.ErrClosed, want: schemas.SocketError},

		{name: "broker answer before the transport error around it", err: fmt.Errorf("publish: %w", &net.OpError{Op: "read", Err: &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}}), want: schemas.Full},
		{name: "refused", err: refused, want: schemas.SocketError},
		{name: "dns", err: &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nats.invalid", IsNotFound: true}}, want: schemas.ResolutionError},
		{name: "gochannel closed", err: errors.New("Pub/Sub closed"), want: schemas.SocketError},
		{name: "unknown", err: errors.New("something else"), want: schemas.GenericError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := broker.Classify(tt.err, tt.parent); got != tt.want {
				t.Errorf("Classify(%v, %v) = %s, want %s", tt.err, tt.parent, got, tt.want)
			}
		})
	}
}
