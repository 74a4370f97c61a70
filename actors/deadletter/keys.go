package deadletter

import (
	"fmt"
	"strings"
	"time"
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

// Key returns the key of a dead-letter object written at t:
// "<prefix>/<YYYY>/<M>/<D>/<H>/<id>.json", in UTC and not zero-padded, as Event Grid names its
// blobs (eventgrid-behaviour.md §7.2). It is pure: the caller passes the time and the id.
func Key(prefix string, t time.Time, id string) string {
	t = t.UTC()
	return fmt.Sprintf("%s/%d/%d/%d/%d/%s.json", prefix, t.Year(), int(t.Month()), t.Day(), t.Hour(), id)
}
