package schemas

import "fmt"

// Outcome is the result of one delivery attempt, in Event Grid's vocabulary (the
// lastDeliveryOutcome values of eventgrid-behaviour.md §7.3 and the DeliveryAttemptFailCount
// Error dimension).
type Outcome uint8

// Outcomes. Delivered is success; every other value is a kind of failure.
const (
	Delivered Outcome = iota + 1
	BadRequest
	Unauthorized
	Forbidden
	NotFound
	PayloadTooLarge
	URITooLong
	Busy
	TimedOut
	SocketError
	ResolutionError
	InvalidDestination
	Disabled
	Full
	Canceled
	Aborted
	Probation
	GenericError
)

var outcomeNames = [...]string{
	Delivered:          "Delivered",
	BadRequest:         "BadRequest",
	Unauthorized:       "Unauthorized",
	Forbidden:          "Forbidden",
	NotFound:           "NotFound",
	PayloadTooLarge:    "PayloadTooLarge",
	URITooLong:         "UriTooLong",
	Busy:               "Busy",
	TimedOut:           "TimedOut",
	SocketError:        "SocketError",
	ResolutionError:    "ResolutionError",
	InvalidDestination: "InvalidDestination",
	Disabled:           "Disabled",
	Full:               "Full",
	Canceled:           "Canceled",
	Aborted:            "Aborted",
	Probation:          "Probation",
	GenericError:       "GenericError",
}

// String returns the Event Grid wire name of the outcome.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// OutcomeForStatus classifies an HTTP status code an endpoint answered with. Success codes
// (200-204, SPEC §2.1) give Delivered.
func OutcomeForStatus(code int) Outcome {
	switch {
	case code >= 200 && code <= 204:
		return Delivered
	case code == 400:
		return BadRequest
	case code == 401:
		return Unauthorized
	case code == 403:
		return Forbidden
	case code == 404:
		return NotFound
	case code == 408:
		return TimedOut
	case code == 413:
		return PayloadTooLarge
	case code == 414:
		return URITooLong
	case code == 429 || code == 503:
		return Busy
	}
	return GenericError
}

// Reason says why an event ended without delivery: the deadLetterReason of a dead-letter record
// and the DropReason / DeadLetterReason metric dimensions.
type Reason string

// Reasons (SPEC §5).
const (
	MaxDeliveryAttemptsExceeded                    Reason = "MaxDeliveryAttemptsExceeded"
	TimeToLiveExceeded                             Reason = "TimeToLiveExceeded"
	UndeliverableDueToHTTPBadRequest               Reason = "UndeliverableDueToHttpBadRequest"
	UndeliverableDueToClientError                  Reason = "UndeliverableDueToClientError"
	UndeliverableDueToProbationCausedByClientError Reason = "UndeliverableDueToProbationCausedByClientError"
	DeadLetterDestinationUnavailable               Reason = "DeadLetterDestinationUnavailable"
	// UndeliverableDueToEventContent is egrid's own reason (Event Grid has none like it): the
	// event itself cannot be encoded or sent — a delivery header it would set cannot be
	// built, say — so no request could carry it. Publish validation refuses such events
	// ([HeaderValueProblem]); this ends one that got past it (stored by an older version, or
	// put into the store directly) without blaming the endpoint.
	UndeliverableDueToEventContent Reason = "UndeliverableDueToEventContent"
	// RejectedBySubscriber ends an event a consumer of a queue subscription rejected
	// (eventgrid-behaviour.md §9 :reject): it is dead-lettered at once, or dropped without a
	// dead-letter destination. Azure documents no reason name for it; this one is egrid's.
	RejectedBySubscriber Reason = "RejectedBySubscriber"
)

// Delivery request header names (SPEC §2.4).
const (
	HeaderEventType        = "aeg-event-type"
	HeaderSubscriptionName = "aeg-subscription-name"
	HeaderDeliveryCount    = "aeg-delivery-count"
	HeaderMetadataVersion  = "aeg-metadata-version"
	HeaderDataVersion      = "aeg-data-version"
	HeaderOutputEventID    = "aeg-output-event-id"
	HeaderTraceparent      = "traceparent"
	HeaderTracestate       = "tracestate"
)

// Values of the aeg-event-type header.
const (
	EventTypeNotification           = "Notification"
	EventTypeSubscriptionValidation = "SubscriptionValidation"
	EventTypeSubscriptionDeletion   = "SubscriptionDeletion"
)

// Content types of requests and deliveries.
const (
	ContentTypeJSON             = "application/json; charset=utf-8"
	ContentTypeCloudEvent       = "application/cloudevents+json; charset=utf-8"
	ContentTypeCloudEventsBatch = "application/cloudevents-batch+json; charset=utf-8"
)
