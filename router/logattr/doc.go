// Package logattr names the attributes of egrid's structured logs, so that every line about
// an event carries the same keys whichever package writes it: an operator filters a JSON log
// on topic, subscription and eventId and sees an event's whole story.
//
// Every log line about a topic carries [Topic]; about a subscription, [Topic] and
// [Subscription]; about one event, those and [EventID]. Loggers add them once with
// slog.Logger.With where the scope begins (a subscription actor's logger has its topic and
// subscription), and per line for the event.
//
// logattr imports nothing but the standard library.
package logattr
