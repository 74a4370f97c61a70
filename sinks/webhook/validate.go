package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
)

// Wire names of the endpoint validation handshakes (SPEC §2.5, eventgrid-behaviour.md §5.2 and
// §5.3).
const (
	// ValidationEventType is the eventType of the event that asks an Event Grid schema
	// endpoint to prove it wants the subscription.
	ValidationEventType = "Microsoft.EventGrid.SubscriptionValidationEvent"
	// DefaultRequestOrigin is the WebHook-Request-Origin egrid sends in the CloudEvents
	// abuse-protection request. It is Azure's own value, so handlers written for Azure Event
	// Grid (which often check it) accept egrid unchanged.
	DefaultRequestOrigin = "eventgrid.azure.net"

	hdrRequestOrigin = "WebHook-Request-Origin"
	hdrAllowedOrigin = "WebHook-Allowed-Origin"
	hdrAllowedRate   = "WebHook-Allowed-Rate"
)

// Validation is the result of an Event Grid validation handshake that the endpoint did not
// refuse.
type Validation uint8

const (
	// Validated: the endpoint answered 200 with {"validationResponse": "<the code>"}.
	Validated Validation = iota + 1
	// AwaitingManualAction: the endpoint answered 200 without the code; it may still GET the
	// validationUrl it was sent.
	AwaitingManualAction
)

// String returns the provisioning state the result leads to.
func (v Validation) String() string {
	switch v {
	case Validated:
		return "Succeeded"
	case AwaitingManualAction:
		return "AwaitingManualAction"
	}
	return fmt.Sprintf("Validation(%d)", uint8(v))
}

// HandshakeError is a validation handshake the endpoint refused or that got no answer. Its
// message names the endpoint without its query string or user info.
type HandshakeError struct {
	// Outcome classifies the failure like a delivery attempt's (TimedOut, SocketError,
	// Forbidden, ...).
	Outcome schemas.Outcome
	// StatusCode is the HTTP status of the answer, or 0 when there was none.
	StatusCode int
	// Reason says what the endpoint did and what it should do instead.
	Reason string
}

// Error describes the failure.
func (e *HandshakeError) Error() string { return e.Reason }

// Transient reports whether the failure may pass by itself, so the handshake is worth one
// more try (Event Grid retries a validation call after 5 seconds): no answer at all, 408,
// 429 or a 5xx status.
func (e *HandshakeError) Transient() bool {
	switch {
	case e.StatusCode == 0:
		return e.Outcome != schemas.InvalidDestination
	case e.StatusCode == http.StatusRequestTimeout, e.StatusCode == http.StatusTooManyRequests:
		return true
	}
	return e.StatusCode >= 500
}

// ValidationRequest describes one Event Grid validation handshake (SPEC §2.5), used for
// subscriptions that deliver in the Event Grid or a custom schema.
type ValidationRequest struct {
	// URL is the endpoint, query string included.
	URL string
	// Subscription is the event subscription's name (sent upper case in
	// aeg-subscription-name, as deliveries are).
	Subscription string
	// TopicID is the validation event's topic.
	TopicID string
	// EventID is the validation event's id.
	EventID string
	// Code is the validationCode the endpoint must echo.
	Code string
	// ValidationURL is the URL the endpoint may GET instead of echoing the code; empty leaves
	// it out of the event.
	ValidationURL string
	// Time is the validation event's eventTime.
	Time time.Time
	// Headers are the destination's custom headers; the static ones are sent (there is no
	// event to resolve dynamic ones from).
	Headers sinks.HeaderMappings
	// Timeout bounds the call; zero means [sinks.DefaultTimeout] (30 s, as Event Grid's).
	Timeout time.Duration
}

// validationEvent is the body of the handshake: an Event Grid event in a one-element array.
type validationEvent struct {
	ID              string         `json:"id"`
	Topic           string         `json:"topic"`
	Subject         string         `json:"subject"`
	Data            validationData `json:"data"`
	EventType       string         `json:"eventType"`
	EventTime       string         `json:"eventTime"`
	MetadataVersion string         `json:"metadataVersion"`
	DataVersion     string         `json:"dataVersion"`
}

type validationData struct {
	ValidationCode string `json:"validationCode"`
	ValidationURL  string `json:"validationUrl,omitempty"`
}

// ValidateSubscription performs one Event Grid validation handshake: it POSTs a
// SubscriptionValidationEvent with header aeg-event-type: SubscriptionValidation and reads the
// answer. It returns Validated when the endpoint answered 200 with {"validationResponse":
// "<code>"} (the property name is matched exactly, as Event Grid does), AwaitingManualAction
// when it answered 200 without it, and a *[HandshakeError] otherwise (any other status — 202
// is not accepted either —, a wrong code, or no answer within the timeout). It makes one
// attempt: retrying is the caller's policy. client nil means [SharedClient].
func ValidateSubscription(ctx context.Context, client *http.Client, vr ValidationRequest) (Validation, error) {
	u, err := parseURL(vr.URL)
	if err != nil {
		return 0, err
	}
	display := displayURL(u)
	body, err := json.Marshal([]validationEvent{{
		ID: vr.EventID, Topic: vr.TopicID, Data: validationData{ValidationCode: vr.Code, ValidationURL: vr.ValidationURL},
		EventType: ValidationEventType, EventTime: vr.Time.UTC().Format(time.RFC3339Nano), MetadataVersion: "1", DataVersion: "1",
	}})
	if err != nil {
		return 0, err
	}
	h := make(http.Header)
	for name, value := range vr.Headers.Static() {
		if validHeaderName(name) && validHeaderValue(value) {
			h.Set(name, value)
		}
	}
	protocol, err := schemas.DeliveryHeaders{
		EventType: schemas.EventTypeSubscriptionValidation, Schema: schemas.EventGrid,
		Subscription: vr.Subscription, ContentType: schemas.ContentTypeJSON,
		Event: &schemas.Event{ID: vr.EventID, DataVersion: "1"},
	}.Append(nil)
	if err != nil {
		return 0, err
	}
	for _, p := range protocol {
		h.Set(p.Name, p.Value)
	}

	resp, answer, herr := roundTrip(ctx, client, http.MethodPost, vr.URL, display, h, body, vr.Timeout, "the SubscriptionValidation event", true)
	if herr != nil {
		return 0, herr
	}
	if resp.StatusCode != http.StatusOK {
		return 0, &HandshakeError{
			Outcome: schemas.OutcomeForStatus(resp.StatusCode), StatusCode: resp.StatusCode,
			Reason: fmt.Sprintf("%s answered %s to the SubscriptionValidation event; the endpoint must answer 200 with {\"validationResponse\": \"<validationCode>\"}, or answer 200 and then GET the validationUrl", display, statusOf(resp)),
		}
	}
	// The name is matched exactly: Event Grid is reported to ignore "ValidationResponse"
	// (eventgrid-behaviour.md §5.2), and encoding/json would match it ignoring case.
	var reply map[string]json.RawMessage
	var echoed string
	if err := json.Unmarshal(answer, &reply); err != nil || reply["validationResponse"] == nil || json.Unmarshal(reply["validationResponse"], &echoed) != nil {
		return AwaitingManualAction, nil
	}
	if echoed != vr.Code {
		return 0, &HandshakeError{
			Outcome: schemas.BadRequest, StatusCode: resp.StatusCode,
			Reason: fmt.Sprintf("%s answered the SubscriptionValidation event with a validationResponse that is not the validationCode it was sent; echo data.validationCode exactly", display),
		}
	}
	return Validated, nil
}

// AbuseProtectionRequest describes one CloudEvents abuse-protection handshake (SPEC §2.5, the
// CloudEvents HTTP Web Hooks specification §4), used for subscriptions that deliver
// CloudEvents.
type AbuseProtectionRequest struct {
	// URL is the endpoint, query string included.
	URL string
	// Origin is sent as WebHook-Request-Origin; empty means [DefaultRequestOrigin].
	Origin string
	// Headers are the destination's custom headers; the static ones are sent.
	Headers sinks.HeaderMappings
	// Timeout bounds the call; zero means [sinks.DefaultTimeout].
	Timeout time.Duration
}

// RequestDelivery asks a CloudEvents endpoint for permission to deliver to it: an HTTP OPTIONS
// request with WebHook-Request-Origin. The endpoint consents with a 2xx answer whose
// WebHook-Allowed-Origin echoes the origin or is "*" (the status alone is not consent). It
// returns the request rate the endpoint allows, in requests per minute, from
// WebHook-Allowed-Rate: 0 when it sets none, "*", or a value that is not a positive integer.
// A refusal or no answer is a *[HandshakeError]. One attempt; client nil means [SharedClient].
func RequestDelivery(ctx context.Context, client *http.Client, ar AbuseProtectionRequest) (perMinute int, err error) {
	u, err := parseURL(ar.URL)
	if err != nil {
		return 0, err
	}
	display := displayURL(u)
	origin := ar.Origin
	if origin == "" {
		origin = DefaultRequestOrigin
	}
	h := make(http.Header)
	for name, value := range ar.Headers.Static() {
		if validHeaderName(name) && validHeaderValue(value) {
			h.Set(name, value)
		}
	}
	h.Set(hdrRequestOrigin, origin)
	resp, _, herr := roundTrip(ctx, client, http.MethodOptions, ar.URL, display, h, nil, ar.Timeout, "the OPTIONS abuse-protection request", false)
	if herr != nil {
		return 0, herr
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, &HandshakeError{
			Outcome: schemas.OutcomeForStatus(resp.StatusCode), StatusCode: resp.StatusCode,
			Reason: fmt.Sprintf("%s answered %s to the OPTIONS abuse-protection request; a CloudEvents endpoint must answer 200 with WebHook-Allowed-Origin: %s (or *)", display, statusOf(resp), origin),
		}
	}
	allowed := strings.TrimSpace(resp.Header.Get(hdrAllowedOrigin))
	if allowed != "*" && !strings.EqualFold(allowed, origin) {
		reason := fmt.Sprintf("%s answered the OPTIONS abuse-protection request without WebHook-Allowed-Origin; consent needs WebHook-Allowed-Origin: %s (or *)", display, origin)
		if allowed != "" {
			reason = fmt.Sprintf("%s answered the OPTIONS abuse-protection request with WebHook-Allowed-Origin %q, not the requested origin; consent needs WebHook-Allowed-Origin: %s (or *)", display, clip.String(allowed), origin)
		}
		return 0, &HandshakeError{Outcome: schemas.Forbidden, StatusCode: resp.StatusCode, Reason: reason}
	}
	if n, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get(hdrAllowedRate))); err == nil && n > 0 {
		return n, nil
	}
	return 0, nil
}

// roundTrip sends one handshake request and returns the response, with up to 64 KB of its
// body when readBody is set (the body is closed either way), or a *HandshakeError when no
// answer came. A body that stops before its end (the timeout passed while the endpoint
// trickled it, or the endpoint closed the connection) is no answer either: the handshake
// would otherwise read a cut-off validationResponse as its absence. Without readBody the
// answer is complete at its head, and an endpoint that never sends the rest of its body does
// not hold the handshake until the timeout.
func roundTrip(ctx context.Context, client *http.Client, method, rawURL, display string, h http.Header, body []byte, timeout time.Duration, what string, readBody bool) (*http.Response, []byte, *HandshakeError) {
	if client == nil {
		client = SharedClient()
	}
	if timeout <= 0 {
		timeout = sinks.DefaultTimeout
	}
	actx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("no answer within %s: %w", timeout, context.DeadlineExceeded))
	defer cancel()
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, rawURL, rd)
	if err != nil {
		return nil, nil, &HandshakeError{Outcome: schemas.InvalidDestination, Reason: fmt.Sprintf("building %s for %s failed", what, display)}
	}
	req.Header = h
	failed := func(err error) error {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error prints the whole URL, query string and all
		}
		if actx.Err() != nil && ctx.Err() == nil {
			err = context.Cause(actx)
		}
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		err = failed(err)
		return nil, nil, &HandshakeError{
			Outcome: classify(err, ctx.Err()),
			Reason:  fmt.Sprintf("%s did not answer %s: %v", display, what, err),
		}
	}
	if !readBody {
		_ = resp.Body.Close()
		return resp, nil, nil
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	if err != nil {
		err = failed(err)
		return nil, nil, &HandshakeError{
			Outcome: classify(err, ctx.Err()),
			Reason:  fmt.Sprintf("%s answered %s with %s but its body did not arrive whole: %v", display, what, statusOf(resp), err),
		}
	}
	return resp, answer, nil
}

// displayURL is u without query string and user info, for messages.
func displayURL(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
}
