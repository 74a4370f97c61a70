package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// redisClient is a client of the Redis server s.
func redisClient(s RedisServer) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: s.Addr, Username: s.Username, Password: s.Password, DB: s.DB,
		DialTimeout: dialTimeout,
		// No hidden retries: the subscription's policy retries, and sees every failure.
		MaxRetries: -1,
	})
}

func openRedisPublisher(s RedisServer, wlog watermill.LoggerAdapter) (message.Publisher, error) {
	return redisstream.NewPublisher(redisstream.PublisherConfig{Client: redisClient(s)}, wlog)
}

// redisClaimIdle is how long a pending message of a Redis source waits before the subscriber
// claims it back (see openRedisSubscriber).
const redisClaimIdle = 15 * time.Second

func openRedisSubscriber(s RedisServer, group string, wlog watermill.LoggerAdapter) (message.Subscriber, error) {
	client := redisClient(s)
	client.AddHook(redisEntryIDs{})
	return redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:        client,
		ConsumerGroup: group,
		// Every entry becomes a message, so that the source decides what becomes of it: an
		// entry watermill-redisstream's own unmarshaller refuses ended the subscription
		// unanswered, and stayed pending at the head of the stream for good, each claim
		// ending the subscription again and holding back the entries behind it.
		Unmarshaller: redisUnmarshaller{},
		// A new consumer group reads the stream from its first entry.
		OldestId: "0",
		// A message Redis hands to a connection that is dying (the source's read in flight
		// when the connection drops) stays pending for this consumer with no one holding it,
		// until the subscriber claims it back: after redisClaimIdle, not the library's
		// minute. A message the source holds that long (a topic refusing it, nacked with
		// pauses of up to 10 s) may be claimed while in hand and so read twice: sources are
		// at least once.
		MaxIdleTime:                   redisClaimIdle,
		ClaimInterval:                 redisClaimIdle / 5,
		NackResendSleep:               time.Second,
		DisableIndefiniteInitialBlock: true,
	}, wlog)
}

// redisPayloadField is the field of a Redis stream entry that holds its payload in
// watermill-redisstream's wire format; redisMetadataField holds its metadata (msgpack).
const (
	redisPayloadField  = "payload"
	redisMetadataField = "metadata"
)

// redisUnmarshaller reads the entries of a Redis stream into messages and never fails (see
// redisMessage).
type redisUnmarshaller struct{}

func (redisUnmarshaller) Unmarshal(values map[string]any) (*message.Message, error) {
	return redisMessage(values), nil
}

// redisMessage reads an entry of a Redis stream in watermill-redisstream's wire format (the
// UUID, payload and metadata fields), and any other entry as well, so that a source decides
// what becomes of it: an entry without the UUID field has its entry ID as UUID (see
// redisEntryIDs); an entry without a payload field whose only field is another takes that
// field's value as payload; metadata that does not decode is kept as it came, under
// "metadata"; the fields besides these become metadata, but for an UnreadableKey, which is
// dropped (see dropReserved). An entry with neither a payload field nor a single field has no
// payload: the message carries UnreadableKey, saying so.
func redisMessage(values map[string]any) *message.Message {
	text := func(v any) string {
		switch v := v.(type) {
		case string:
			return v
		case []byte:
			return string(v)
		default:
			return fmt.Sprint(v)
		}
	}
	uuid, _ := values[redisstream.UUIDHeaderKey].(string)
	m := message.NewMessage(uuid, nil)
	others := make([]string, 0, len(values))
	for k := range values {
		if k != redisstream.UUIDHeaderKey {
			others = append(others, k)
		}
	}
	slices.Sort(others)
	payload, hasPayload := values[redisPayloadField]
	switch {
	case hasPayload:
		m.Payload = []byte(text(payload))
	case len(others) == 1:
		m.Payload = []byte(text(values[others[0]]))
		return m
	case len(others) == 0:
		m.Metadata.Set(UnreadableKey, "the Redis stream entry has no fields, so no events: add entries with a field payload holding a publish body (a JSON array of events, or one event)")
		return m
	default:
		m.Metadata.Set(UnreadableKey, fmt.Sprintf("the Redis stream entry has no field %s, and more than one other (%s), so egrid cannot tell which holds its events: add entries with a field payload holding a publish body (a JSON array of events, or one event), or with that body as their only field", redisPayloadField, shorten(strings.Join(others, ", "))))
	}
	if raw, ok := values[redisMetadataField]; ok {
		v := text(raw)
		md, err := (redisstream.DefaultMarshallerUnmarshaller{}).Unmarshal(map[string]any{redisstream.UUIDHeaderKey: uuid, redisMetadataField: v})
		if err != nil {
			md = message.NewMessage(uuid, nil)
			md.Metadata.Set(redisMetadataField, v)
		}
		for k, v := range md.Metadata {
			if k != UnreadableKey && m.Metadata.Get(k) == "" {
				m.Metadata.Set(k, v)
			}
		}
	}
	for _, k := range others {
		if k != redisPayloadField && k != redisMetadataField && k != UnreadableKey && m.Metadata.Get(k) == "" {
			m.Metadata.Set(k, text(values[k]))
		}
	}
	return m
}

// redisEntryIDs is a go-redis hook that gives each stream entry a read returns without
// watermill-redisstream's UUID field its entry ID (the one XADD made) in that field, so a
// foreign entry is named in the log and the poison queue by the ID that finds it in the
// stream. The unmarshaller is not given the ID.
type redisEntryIDs struct{}

func (redisEntryIDs) DialHook(next redis.DialHook) redis.DialHook { return next }

func (redisEntryIDs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (redisEntryIDs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch c := cmd.(type) {
		case *redis.XStreamSliceCmd: // XREADGROUP
			for _, xs := range c.Val() {
				withEntryIDs(xs.Messages)
			}
		case *redis.XMessageSliceCmd: // XCLAIM
			withEntryIDs(c.Val())
		}
		return err
	}
}

func withEntryIDs(entries []redis.XMessage) {
	for i := range entries {
		if _, ok := entries[i].Values[redisstream.UUIDHeaderKey]; ok {
			continue
		}
		if entries[i].Values == nil {
			entries[i].Values = map[string]any{}
		}
		entries[i].Values[redisstream.UUIDHeaderKey] = entries[i].ID
	}
}
