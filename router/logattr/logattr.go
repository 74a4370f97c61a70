package logattr

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
