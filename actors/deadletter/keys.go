package deadletter

import (
	"fmt"
	"strings"
	"time"

	"github.com/egridio/egrid/sinks"
)

// The object key layout of dead letters (SPEC §5): where the actor writes and where reading
// and replaying look.

// Prefix returns the key prefix of a subscription's dead-letter objects (SPEC §5,
// eventgrid-behaviour.md §7.2 and §7.5): the subscription's name in upper case for a classic
// topic (Event Grid upper-cases it deliberately), "<namespace>/<topic>/<subscription>" for a
// namespace topic (namespace non-empty).
func Prefix(namespace, topic, subscription string) string {
	if namespace == "" {
		return strings.ToUpper(subscription)
	}
	return namespace + "/" + topic + "/" + subscription
}

// TopicMetadata names the object metadata (S3 user metadata, x-amz-meta-egrid-topic) in
// which the dead-letter actor writes the name of the topic whose records an object holds.
// Event Grid's classic key layout names only the subscription, upper-cased, so subscriptions
// of one name on two topics share a prefix in a shared bucket; readers tell their objects
// apart by it ([BelongsTo]).
const TopicMetadata = "egrid-topic"

// BelongsTo says whether the object described by info holds dead letters of topic: its
// [TopicMetadata] names topic (topic names are case-insensitive). An object without it — one
// written before egrid wrote it, or listed by a server that lists no metadata — belongs to
// whichever topic reads it under its prefix: Event Grid's own key names no topic either.
func BelongsTo(info sinks.ObjectInfo, topic string) bool {
	owner, ok := info.Metadata[TopicMetadata]
	return !ok || strings.EqualFold(owner, topic)
}

// Key returns the key of a dead-letter object written at t:
// "<prefix>/<YYYY>/<M>/<D>/<H>/<id>.json", in UTC and not zero-padded, as Event Grid names its
// blobs (eventgrid-behaviour.md §7.2). It is pure: the caller passes the time and the id.
func Key(prefix string, t time.Time, id string) string {
	t = t.UTC()
	return fmt.Sprintf("%s/%d/%d/%d/%d/%s.json", prefix, t.Year(), int(t.Month()), t.Day(), t.Hour(), id)
}

// HourPrefix returns the key prefix of the objects [Key] names for times in t's hour:
// "<prefix>/<YYYY>/<M>/<D>/<H>/" (UTC). All keys of an hour begin with it, and they alone.
func HourPrefix(prefix string, t time.Time) string {
	t = t.UTC()
	return fmt.Sprintf("%s/%d/%d/%d/%d/", prefix, t.Year(), int(t.Month()), t.Day(), t.Hour())
}

// KeyHour parses key as one [Key] names under prefix: it returns the key's [HourPrefix] and the
// start of that hour. ok is false for a key outside that layout (an object not written by
// egrid, or by Event Grid, under the prefix).
func KeyHour(prefix, key string) (hour string, start time.Time, ok bool) {
	rest, found := strings.CutPrefix(key, prefix+"/")
	if !found {
		return "", time.Time{}, false
	}
	var n [4]int
	off := 0
	for i := range n {
		j := strings.IndexByte(rest[off:], '/')
		if j <= 0 || j > 4 {
			return "", time.Time{}, false
		}
		for _, c := range rest[off : off+j] {
			if c < '0' || c > '9' {
				return "", time.Time{}, false
			}
			n[i] = n[i]*10 + int(c-'0')
		}
		off += j + 1
	}
	if n[1] < 1 || n[1] > 12 || n[2] < 1 || n[2] > 31 || n[3] > 23 || strings.Contains(rest[off:], "/") {
		return "", time.Time{}, false
	}
	start = time.Date(n[0], time.Month(n[1]), n[2], n[3], 0, 0, 0, time.UTC)
	return key[:len(prefix)+1+off], start, true
}
