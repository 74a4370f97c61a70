// Package retry is egrid's delivery policy: what happens after a failed attempt, when an event
// has lived too long, and when an endpoint is put on probation (SPEC §2.1, §2.2). It is the one
// place where failures are classified; the subscription actor calls it and does what it says.
//
// The model:
//
//   - A [Profile] is a retry profile as data: the schedule of delays, the HTTP statuses and
//     connection-level outcomes that are never retried, the minimum delay per status ("floors"),
//     and the ranges of the two knobs a subscription may set. Three are built in —
//     [EventGrid] (the default), [EventGrid2019] and [Namespace] — and [CustomProfile] puts a
//     user's own schedule on top of a built-in status policy.
//   - A [Policy] is one subscription's effective policy: a profile plus maxDeliveryAttempts,
//     the event time to live, whether a dead-letter destination is configured, the jitter seed,
//     the server's time scale, and whether the Retry-After extension is on (Azure documents no
//     Retry-After handling, so it is off unless asked for).
//   - [Policy.AfterFailure] turns a [Failure] (what a sink reported) into a [Decision]: retry at
//     a given instant, dead-letter, or drop, with the Event Grid reason.
//   - [Policy.AtDue] applies the time to live. Event Grid checks it only when the next attempt
//     comes due, never at the instant it lapses (SPEC §2.1), so AfterFailure ignores it and the
//     actor asks AtDue when a parked event's timer fires.
//   - [Probation] is the per-endpoint probation state machine of SPEC §2.2, a value the
//     subscription actor keeps next to its queue.
//
// Everything here is deterministic: the jitter comes from a hash of the subscription's seed,
// the event id and the attempt number, so a delivery timeline replays exactly.
//
// retry is pure: it imports only schemas and the standard library, never reads the clock (every
// function takes now), starts no goroutines and uses no global random source.
package retry
