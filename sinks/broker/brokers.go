package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/lib/pq"

	"github.com/egridio/egrid/schemas/clip"
)

// Kind names a broker egrid connects to out of the box. Its value is the endpointType of a
// subscription that publishes to the broker and the broker of a source that reads from it.
type Kind string

// The brokers egrid supports out of the box.
const (
	// NATSJetStream publishes to a NATS subject captured by a JetStream stream (in
	// watermill-nats v2's jetstream wire format, through nats.go).
	NATSJetStream Kind = "NatsJetStream"
	// RabbitMQ publishes to a RabbitMQ queue (used as it is, or declared durable when there is
	// none) through the default exchange, with publisher confirms (in watermill-amqp v3's wire format, through amqp091-go).
	RabbitMQ Kind = "RabbitMQ"
	// RedisStream appends to a Redis stream (watermill-redisstream).
	RedisStream Kind = "RedisStream"
	// PostgreSQL inserts into the table of a watermill-sql topic (watermill-sql v3).
	PostgreSQL Kind = "PostgreSQL"
	// GoChannel publishes to an in-process watermill GoChannel: for embedding and tests.
	GoChannel Kind = "GoChannel"
)

// Kinds lists the brokers egrid supports out of the box.
var Kinds = []Kind{NATSJetStream, RabbitMQ, RedisStream, PostgreSQL, GoChannel}

// ParseKind returns the Kind named s, matched case-insensitively as ARM matches enum values.
func ParseKind(s string) (Kind, bool) {
	for _, k := range Kinds {
		if strings.EqualFold(s, string(k)) {
			return k, true
		}
	}
	return "", false
}

// String returns the endpointType name.
func (k Kind) String() string { return string(k) }

// Property is the name of the destination property that says where on the broker to publish:
// "subject" (NatsJetStream), "queue" (RabbitMQ), "stream" (RedisStream) or "topic"
// (PostgreSQL, GoChannel).
func (k Kind) Property() string {
	switch k {
	case NATSJetStream:
		return "subject"
	case RabbitMQ:
		return "queue"
	case RedisStream:
		return "stream"
	}
	return "topic"
}

// Setting is the key of the kind's connection settings under server.brokers in the YAML
// config ("nats", "rabbitmq", "redis", "postgres"), or "" for GoChannel, which needs none.
func (k Kind) Setting() string {
	switch k {
	case NATSJetStream:
		return "nats"
	case RabbitMQ:
		return "rabbitmq"
	case RedisStream:
		return "redis"
	case PostgreSQL:
		return "postgres"
	}
	return ""
}

// MaxNameBytes bounds a subject, queue, stream or topic name, in bytes of UTF-8: RabbitMQ's
// bound on a queue name (AMQP 0-9-1 sends it as a short string), taken for every kind.
const MaxNameBytes = 255

// PostgreSQL cuts identifiers at 63 bytes (NAMEDATALEN-1), silently: two names alike in their
// first 63 bytes name one table. A topic's table is "watermill_<topic>", and the offsets table
// a source's consumer group keeps is "watermill_offsets_<topic>", so a topic takes at most
// these many bytes.
const (
	// PostgresMaxTopicBytes bounds a PostgreSQL topic published to: 63 bytes less
	// "watermill_".
	PostgresMaxTopicBytes = 63 - len("watermill_")
	// PostgresMaxSourceTopicBytes bounds a PostgreSQL topic a source reads: 63 bytes less
	// "watermill_offsets_".
	PostgresMaxSourceTopicBytes = 63 - len("watermill_offsets_")
)

// ValidateName checks the subject, queue, stream or topic name a destination publishes to on
// a broker of kind k (or a source's poison queue), and says what is wrong with it: empty, over
// [MaxNameBytes] bytes (over [PostgresMaxTopicBytes] for PostgreSQL), or not a NATS subject
// or a PostgreSQL topic name. Its messages repeat at most the first bytes of the name
// ([clip.String]).
func (k Kind) ValidateName(name string) error {
	return k.validateName(name, PostgresMaxTopicBytes, "watermill_")
}

// ValidateSourceName is [Kind.ValidateName] for the subject, queue, stream or topic a source
// reads: a PostgreSQL topic takes at most [PostgresMaxSourceTopicBytes] there, for the offsets
// table its consumer group keeps.
func (k Kind) ValidateSourceName(name string) error {
	return k.validateName(name, PostgresMaxSourceTopicBytes, "watermill_offsets_")
}

func (k Kind) validateName(name string, pgMax int, pgPrefix string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("is empty; name the %s to use", k.Property())
	case k == NATSJetStream && !natsSubjectRE.MatchString(name):
		return fmt.Errorf("%q is not a NATS subject to publish to: use tokens of letters, digits, '-' and '_' separated by '.', without wildcards", clip.String(name))
	case k == PostgreSQL && !sqlTopicRE.MatchString(name):
		return fmt.Errorf("%q cannot name a PostgreSQL topic: use letters, digits and - $ : . _ only", clip.String(name))
	case k == PostgreSQL && len(name) > pgMax:
		return fmt.Errorf("is %d bytes long; use at most %d bytes: its table is named %q and the topic, and PostgreSQL cuts a table name at 63 bytes (its 63-byte identifier limit), so two longer topics alike in their first %d bytes would share one table", len(name), pgMax, pgPrefix, pgMax)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("is %d bytes long; use at most %d bytes (a letter outside ASCII takes 2 to 4)", len(name), MaxNameBytes)
	}
	return nil
}

var (
	natsSubjectRE = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
	sqlTopicRE    = regexp.MustCompile(`^[A-Za-z0-9\-$:._]+$`)
)

// Servers are the connection settings of the brokers (`server.brokers` in the YAML config).
// A broker without settings is not available, except GoChannel, which is in-process.
type Servers struct {
	// NATS is a NATS server with JetStream enabled.
	NATS *NATSServer `json:"nats,omitempty" yaml:"nats,omitempty"`
	// RabbitMQ is a RabbitMQ (AMQP 0-9-1) server.
	RabbitMQ *RabbitMQServer `json:"rabbitmq,omitempty" yaml:"rabbitmq,omitempty"`
	// Redis is a Redis server (5.0 or newer, for streams).
	Redis *RedisServer `json:"redis,omitempty" yaml:"redis,omitempty"`
	// Postgres is a PostgreSQL database.
	Postgres *PostgresServer `json:"postgres,omitempty" yaml:"postgres,omitempty"`
	// ConsumerGroup names egrid as a consumer when sources read from a broker: the durable
	// JetStream consumer (with the subject), the Redis consumer group and the PostgreSQL
	// consumer group. Default "egrid".
	ConsumerGroup string `json:"consumerGroup,omitempty" yaml:"consumerGroup,omitempty"`
}

// NATSServer are the settings of a NATS server.
type NATSServer struct {
	// URL is the server URL, e.g. nats://127.0.0.1:4222 (several may be given, comma
	// separated, as nats.go takes them). Required.
	URL string `json:"url" yaml:"url"`
}

// RabbitMQServer are the settings of a RabbitMQ server.
type RabbitMQServer struct {
	// URL is the AMQP URI, e.g. amqp://guest:guest@127.0.0.1:5672/. Required.
	URL string `json:"url" yaml:"url"`
}

// RedisServer are the settings of a Redis server.
type RedisServer struct {
	// Addr is host:port, e.g. 127.0.0.1:6379. Required.
	Addr string `json:"addr" yaml:"addr"`
	// Username and Password authenticate (ACL user or requirepass), when set.
	Username string `json:"username,omitempty" yaml:"username,omitempty"`
	Password string `json:"password,omitempty" yaml:"password,omitempty"`
	// DB is the database number (default 0).
	DB int `json:"db,omitempty" yaml:"db,omitempty"`
}

// PostgresServer are the settings of a PostgreSQL database.
type PostgresServer struct {
	// DSN is a lib/pq connection string, e.g.
	// postgres://postgres@127.0.0.1:5432/test?sslmode=disable. Required.
	DSN string `json:"dsn" yaml:"dsn"`
}

// DefaultConsumerGroup is the default [Servers.ConsumerGroup].
const DefaultConsumerGroup = "egrid"

// Validate reports every problem with s at once (joined *[ConfigError] values), or nil.
// Nothing is dialled.
func (s Servers) Validate() error {
	var errs []error
	bad := func(field, reason string) { errs = append(errs, &ConfigError{Field: field, Reason: reason}) }
	if s.NATS != nil {
		if s.NATS.URL == "" {
			bad("nats.url", "is empty; set the server URL, e.g. nats://127.0.0.1:4222")
		}
		for _, u := range strings.Split(s.NATS.URL, ",") {
			if !strings.Contains(u, "://") {
				continue // host:port, which nats.go takes as nats://host:port
			}
			if _, err := url.Parse(strings.TrimSpace(u)); err != nil {
				bad("nats.url", "is not a URL ("+withoutURL(err)+"); use nats://user:password@host:4222")
			}
		}
	}
	if s.RabbitMQ != nil {
		if u, err := url.Parse(s.RabbitMQ.URL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
			bad("rabbitmq.url", "is not an AMQP URI; use amqp://user:password@host:5672/vhost")
		}
	}
	if s.Redis != nil {
		if !strings.Contains(s.Redis.Addr, ":") {
			bad("redis.addr", fmt.Sprintf("%q is not host:port; use e.g. 127.0.0.1:6379", clip.String(s.Redis.Addr)))
		}
		if s.Redis.DB < 0 {
			bad("redis.db", fmt.Sprintf("%d is negative; use a database number >= 0", s.Redis.DB))
		}
	}
	if s.Postgres != nil {
		if s.Postgres.DSN == "" {
			bad("postgres.dsn", "is empty; set a connection string, e.g. postgres://postgres@127.0.0.1:5432/egrid?sslmode=disable")
		} else if _, err := pq.NewConnector(s.Postgres.DSN); err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				bad("postgres.dsn", "is not a URL ("+withoutURL(err)+"); use postgres://user:password@host:5432/database?sslmode=disable")
			} else {
				// lib/pq's own messages may quote a piece of the string, the password too.
				bad("postgres.dsn", "cannot be read as a connection string; use postgres://user:password@host:5432/database?sslmode=disable or host=... port=... user=... password=... dbname=...")
			}
		}
	}
	if s.ConsumerGroup != "" && !consumerGroupRE.MatchString(s.ConsumerGroup) {
		bad("consumerGroup", fmt.Sprintf("%q is invalid; use 1-64 letters, digits, '-' and '_' only", clip.String(s.ConsumerGroup)))
	}
	return errors.Join(errs...)
}

var consumerGroupRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// withoutURL says what is wrong with a URL that did not parse, without the URL: a
// *url.Error quotes it whole, password and all, and a configuration error reaches logs and
// the terminal.
func withoutURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "it cannot be parsed"
}

// Brokers holds the publishers and subscribers of the configured brokers. Connections are
// made on first use and made again after they are lost, so egrid starts while a broker is
// down: deliveries to it fail as SocketError and are retried by the subscription's policy.
// Brokers is safe for concurrent use.
type Brokers struct {
	pubs map[Kind]*lazyPublisher
	subs map[Kind]*lazySubscriber

	closeOnce sync.Once
	closeErr  error
}

// Open validates s and returns the brokers it configures, plus GoChannel. It dials nothing.
// logger receives the watermill libraries' logs (their Info level is logged at Debug); nil
// discards them. Close the Brokers after the router that uses them.
func Open(s Servers, logger *slog.Logger) (*Brokers, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if s.ConsumerGroup == "" {
		s.ConsumerGroup = DefaultConsumerGroup
	}
	wlog := watermill.NewSlogLoggerWithLevelMapping(logger.With("component", "watermill"), map[slog.Level]slog.Level{
		slog.LevelInfo: slog.LevelDebug,
	})
	b := &Brokers{pubs: make(map[Kind]*lazyPublisher), subs: make(map[Kind]*lazySubscriber)}
	if n := s.NATS; n != nil {
		b.add(NATSJetStream,
			func() (message.Publisher, error) { return openNATSPublisher(*n, wlog) },
			func() (message.Subscriber, error) { return openNATSSubscriber(*n, s.ConsumerGroup, wlog) })
		// Each sink gets a connection of its own (see [lazyPublisher.ownPublisher]).
		b.pubs[NATSJetStream].perSink = true
	}
	if r := s.RabbitMQ; r != nil {
		b.add(RabbitMQ,
			func() (message.Publisher, error) { return openRabbitMQPublisher(*r, nil) },
			func() (message.Subscriber, error) { return openRabbitMQSubscriber(*r, nil) })
		// Each sink gets a connection of its own (see [lazyPublisher.ownPublisher]).
		b.pubs[RabbitMQ].perSink = true
	}
	if r := s.Redis; r != nil {
		b.add(RedisStream,
			func() (message.Publisher, error) { return openRedisPublisher(*r, wlog) },
			func() (message.Subscriber, error) { return openRedisSubscriber(*r, s.ConsumerGroup, wlog) })
	}
	if p := s.Postgres; p != nil {
		b.add(PostgreSQL,
			func() (message.Publisher, error) { return openPostgresPublisher(*p, wlog) },
			func() (message.Subscriber, error) { return openPostgresSubscriber(*p, s.ConsumerGroup, wlog) })
	}
	// One in-process pubsub for both directions, so a source can read what a subscription
	// publishes. Publish blocks until every subscriber has acked: a delivery is accepted when
	// the in-process consumers have it.
	gc := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, wlog)
	b.add(GoChannel,
		func() (message.Publisher, error) { return unclosable{gc}, nil },
		func() (message.Subscriber, error) { return unclosable{gc}, nil })
	b.pubs[GoChannel].closer = gc.Close
	return b, nil
}

func (b *Brokers) add(k Kind, pub func() (message.Publisher, error), sub func() (message.Subscriber, error)) {
	b.pubs[k] = newLazyPublisher(k, pub)
	b.subs[k] = newLazySubscriber(k, sub)
}

// Publishers returns the publisher of every configured broker, by kind: what
// router.Deps.Publishers takes.
func (b *Brokers) Publishers() map[Kind]message.Publisher {
	m := make(map[Kind]message.Publisher, len(b.pubs))
	for k, p := range b.pubs {
		m[k] = p
	}
	return m
}

// Subscribers returns the subscriber of every configured broker, by kind: what
// router.Deps.Subscribers takes.
func (b *Brokers) Subscribers() map[Kind]message.Subscriber {
	m := make(map[Kind]message.Subscriber, len(b.subs))
	for k, s := range b.subs {
		m[k] = s
	}
	return m
}

// Publisher returns the publisher of broker k, or false when k is not configured.
func (b *Brokers) Publisher(k Kind) (message.Publisher, bool) {
	p, ok := b.pubs[k]
	return p, ok
}

// Subscriber returns the subscriber of broker k, or false when k is not configured.
func (b *Brokers) Subscriber(k Kind) (message.Subscriber, bool) {
	s, ok := b.subs[k]
	return s, ok
}

// Close closes every connection the Brokers made, subscribers first. Subscriptions' output
// channels close. Close is idempotent.
func (b *Brokers) Close() error {
	b.closeOnce.Do(func() {
		var errs []error
		for _, k := range Kinds {
			if s, ok := b.subs[k]; ok {
				errs = append(errs, s.Close())
			}
		}
		for _, k := range Kinds {
			if p, ok := b.pubs[k]; ok {
				errs = append(errs, p.Close())
			}
		}
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// unclosable shares one GoChannel between a publisher and a subscriber; the Brokers close it
// once.
type unclosable struct{ *gochannel.GoChannel }

func (unclosable) Close() error { return nil }
