package logattr

import "context"

// Attribute keys.
const (
	// Topic is the topic's name.
	Topic = "topic"
	// Subscription is the event subscription's name.
	Subscription = "subscription"
	// EventID is the event's id (Event Grid id, CloudEvents id).
	EventID = "eventId"
	// EventIDs lists the ids of the events of one batch.
	EventIDs = "eventIds"
)

// unfoldedKey marks a context whose log lines are never folded ([Unfolded]).
type unfoldedKey struct{}

// Unfolded returns ctx marked so that the log's flood guard (router/logfold, as egrid serve
// wires it) writes the lines logged with it as they come, never folding repeats into a count:
// for lines each of which says what no other does — the ids of the events a drop lost — and
// whose number their writer bounds. Log with the logger's context methods (WarnContext).
func Unfolded(ctx context.Context) context.Context {
	return context.WithValue(ctx, unfoldedKey{}, true)
}

// IsUnfolded reports whether ctx was marked by [Unfolded].
func IsUnfolded(ctx context.Context) bool {
	return ctx != nil && ctx.Value(unfoldedKey{}) != nil
}
