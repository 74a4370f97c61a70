package router

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
)

var (
	topicNameRE = regexp.MustCompile(`^[A-Za-z0-9-]{3,50}$`)
	subNameRE   = regexp.MustCompile(`^[A-Za-z0-9-]{3,64}$`)
)

// ValidateTopicName checks a topic name: 3-50 characters of letters, digits and '-' (SPEC §8).
func ValidateTopicName(name string) error {
	if !topicNameRE.MatchString(name) {
		return fmt.Errorf("topic name %q is invalid: use 3-50 characters, letters, digits and '-' only", clip.String(name))
	}
	return nil
}

// reservedTopicPrefixes begin the topic names Azure keeps for itself: "the name shouldn't
// start with the following reserved words: Microsoft-, EventGrid-, System-"
// (learn.microsoft.com/azure/event-grid/troubleshoot-errors, since its 07/2020 revision; the
// 08/2019 text listed the words without the hyphen, which the revision corrected, so
// EventGridTopic or systemx are taken). Event subscription names have no reserved words.
var reservedTopicPrefixes = []string{"Microsoft-", "EventGrid-", "System-"}

// checkTopicNameFree refuses a new topic's name that begins with one of Azure's reserved
// words, in any case (names are case-insensitive). Only a create is refused: a topic stored
// under such a name by an earlier egrid still loads, updates and deletes.
func checkTopicNameFree(name string) error {
	for _, p := range reservedTopicPrefixes {
		if len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
			return fmt.Errorf("topic name %q is reserved: names beginning with Microsoft-, EventGrid- or System- (in any case) are Azure's own, as in Event Grid; choose another name (a topic an earlier egrid stored under it is kept)", clip.String(name))
		}
	}
	return nil
}

// ValidateSubscriptionName checks an event subscription name: 3-64 characters of letters, digits
// and '-' (SPEC §8).
func ValidateSubscriptionName(name string) error {
	if !subNameRE.MatchString(name) {
		return fmt.Errorf("event subscription name %q is invalid: use 3-64 characters, letters, digits and '-' only", clip.String(name))
	}
	return nil
}

// TopicKind says whether a topic behaves as a classic custom topic or a namespace topic.
const (
	KindCustom    = ""          // classic custom topic (the default)
	KindNamespace = "namespace" // namespace topic: CloudEvents input, `namespace` retry profile
)

// TopicSpec is a topic's definition: the `properties` of Event Grid's ARM topic resource plus
// egrid's own fields.
type TopicSpec struct {
	// InputSchema is EventGridSchema (default), CloudEventSchemaV1_0 or CustomEventSchema.
	InputSchema string `json:"inputSchema,omitempty" yaml:"inputSchema,omitempty"`
	// InputSchemaMapping maps a custom schema's fields (CustomEventSchema only).
	InputSchemaMapping *InputSchemaMapping `json:"inputSchemaMapping,omitempty" yaml:"inputSchemaMapping,omitempty"`
	// Kind is "" for a classic custom topic or "namespace" for a namespace topic (egrid).
	Kind string `json:"kind,omitempty" yaml:"kind,omitempty"`
	// Key1 and Key2 are the topic's access keys (base64). Generated when empty; never returned
	// by reads, only by listKeys (egrid: ARM keeps them out of the resource too).
	Key1 string `json:"key1,omitempty" yaml:"key1,omitempty"`
	Key2 string `json:"key2,omitempty" yaml:"key2,omitempty"`
}

// InputSchemaMappingJSON is the one inputSchemaMappingType ARM has.
const InputSchemaMappingJSON = "Json"

// InputSchemaMapping is ARM's inputSchemaMapping object.
type InputSchemaMapping struct {
	// InputSchemaMappingType is Json (matched ignoring case); empty means Json.
	InputSchemaMappingType string                `json:"inputSchemaMappingType,omitempty" yaml:"inputSchemaMappingType,omitempty"`
	Properties             *schemas.InputMapping `json:"properties,omitempty" yaml:"properties,omitempty"`
}

// Schema is the topic's input schema (CloudEvents for a namespace topic that names none).
func (s *TopicSpec) Schema() schemas.Schema { return s.schema() }

func (s *TopicSpec) schema() schemas.Schema {
	sc, err := schemas.ParseInputSchema(s.InputSchema)
	if err != nil {
		return 0
	}
	if s.Kind == KindNamespace && s.InputSchema == "" {
		return schemas.CloudEvents
	}
	return sc
}

// Validate reports every problem of the spec at once.
func (s *TopicSpec) Validate() error {
	var errs []error
	sc, err := schemas.ParseInputSchema(s.InputSchema)
	if err != nil {
		errs = append(errs, fmt.Errorf("inputSchema: %w", err))
	}
	switch strings.ToLower(s.Kind) {
	case KindCustom:
	case KindNamespace:
		s.Kind = KindNamespace
		if s.InputSchema != "" && sc != schemas.CloudEvents {
			errs = append(errs, errors.New("inputSchema: a namespace topic takes CloudEventSchemaV1_0 only"))
		}
	default:
		errs = append(errs, fmt.Errorf("kind %q is invalid: use \"\" (custom topic) or \"namespace\"", clip.String(s.Kind)))
	}
	if m := s.InputSchemaMapping; m != nil && m.InputSchemaMappingType != "" && !strings.EqualFold(m.InputSchemaMappingType, InputSchemaMappingJSON) {
		errs = append(errs, fmt.Errorf("inputSchemaMapping.inputSchemaMappingType %q is invalid: use Json (or leave it out)", clip.String(m.InputSchemaMappingType)))
	}
	if sc == schemas.Custom {
		if s.InputSchemaMapping == nil || s.InputSchemaMapping.Properties == nil {
			errs = append(errs, errors.New("inputSchemaMapping: required for CustomEventSchema"))
		} else if err := s.InputSchemaMapping.Properties.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("inputSchemaMapping: %w", err))
		}
	} else if s.InputSchemaMapping != nil {
		errs = append(errs, errors.New("inputSchemaMapping: only allowed with inputSchema CustomEventSchema"))
	}
	return errors.Join(errs...)
}

// Endpoint types of a subscription's destination.
const (
	EndpointWebHook = "WebHook"
	// EndpointSink delivers to a Go [sinks.Sink] registered with the router under
	// destination.properties.sinkName (egrid).
	EndpointSink = "Sink"
)

// SubscriptionSpec is an event subscription's definition: the `properties` of Event Grid's ARM
// eventSubscriptions resource (names as ARM spells them), plus egrid's own fields marked so.
//
// Reads through the admin API never return secrets: the endpoint URL is returned only when it
// has no query string or user info (endpointBaseUrl always is), and static delivery headers
// marked isSecret come back without their value. A PUT that leaves such a value out keeps the
// stored one (see [Router.CreateSubscription]).
type SubscriptionSpec struct {
	// Destination is where a push subscription delivers; a queue subscription
	// (DeliveryConfiguration.DeliveryMode Queue) has none.
	Destination           Destination            `json:"destination,omitzero" yaml:"destination,omitempty"`
	Filter                filter.Spec            `json:"filter,omitzero" yaml:"filter,omitempty"`
	RetryPolicy           RetryPolicy            `json:"retryPolicy,omitzero" yaml:"retryPolicy,omitempty"`
	DeadLetterDestination *DeadLetterDestination `json:"deadLetterDestination,omitempty" yaml:"deadLetterDestination,omitempty"`
	EventDeliverySchema   string                 `json:"eventDeliverySchema,omitempty" yaml:"eventDeliverySchema,omitempty"`
	// Labels are user labels, stored and returned; egrid gives them no meaning (nor does
	// Event Grid). A new definition has at most [MaxLabels] of [MaxLabelLength] characters.
	Labels []string `json:"labels,omitempty" yaml:"labels,omitempty"`
	// ExpirationTimeUTC, when set, is the instant the subscription is deleted by itself. It
	// must be in the future when the subscription is created or updated
	// (eventgrid-behaviour.md §3.1).
	ExpirationTimeUTC time.Time `json:"expirationTimeUtc,omitzero" yaml:"expirationTimeUtc,omitempty"`
	// DeliveryConfiguration is a namespace topic subscription's delivery mode: nil or
	// deliveryMode Push delivers to Destination; deliveryMode Queue keeps the events for
	// consumers to receive and settle (pull delivery, eventgrid-behaviour.md §3.5, §9).
	DeliveryConfiguration *DeliveryConfiguration `json:"deliveryConfiguration,omitempty" yaml:"deliveryConfiguration,omitempty"`
}

// Delivery modes of a namespace topic subscription's [DeliveryConfiguration].
const (
	DeliveryModePush  = "Push"
	DeliveryModeQueue = "Queue"
)

// DeliveryConfiguration is Azure's namespace subscription deliveryConfiguration:
//
//	{"deliveryMode": "Queue", "queue": {"receiveLockDurationInSeconds": 60, "maxDeliveryCount": 10, "eventTimeToLive": "P1D"}}
//
// A push subscription (deliveryMode Push) keeps its destination, retryPolicy and
// deadLetterDestination in the subscription's other fields, as a custom topic's does.
type DeliveryConfiguration struct {
	// DeliveryMode is Push or Queue (matched ignoring case); empty means Push.
	DeliveryMode string `json:"deliveryMode,omitempty" yaml:"deliveryMode,omitempty"`
	// Queue holds a queue subscription's settings (deliveryMode Queue only).
	Queue *QueueInfo `json:"queue,omitempty" yaml:"queue,omitempty"`
}

// QueueInfo is Azure's deliveryConfiguration.queue: the settings of a queue (pull)
// subscription. The dead-letter destination is the subscription's deadLetterDestination.
type QueueInfo struct {
	// ReceiveLockDurationInSeconds is how long a received event stays invisible to other
	// receivers unless it is settled: 60..300, 0 means 60.
	ReceiveLockDurationInSeconds int `json:"receiveLockDurationInSeconds,omitempty" yaml:"receiveLockDurationInSeconds,omitempty"`
	// MaxDeliveryCount is how many times an event may be received before it is dead-lettered
	// (or dropped): 1..10, 0 means 10.
	MaxDeliveryCount int `json:"maxDeliveryCount,omitempty" yaml:"maxDeliveryCount,omitempty"`
	// EventTimeToLive is how long an event stays available from its publish time, an ISO 8601
	// duration of whole minutes from PT1M to P7D (e.g. PT23H12M, P1D, P1DT0H0M0S); empty means
	// the namespace profile's default, P1D (the default namespace topic retention).
	EventTimeToLive string `json:"eventTimeToLive,omitempty" yaml:"eventTimeToLive,omitempty"`
}

// IsQueue says the spec is a queue (pull) subscription: deliveryConfiguration.deliveryMode Queue.
func (s *SubscriptionSpec) IsQueue() bool {
	return s.DeliveryConfiguration != nil && strings.EqualFold(s.DeliveryConfiguration.DeliveryMode, DeliveryModeQueue)
}

// Destination is ARM's polymorphic destination object.
type Destination struct {
	EndpointType string                `json:"endpointType" yaml:"endpointType"`
	Properties   DestinationProperties `json:"properties" yaml:"properties"`
}

// DestinationProperties are the properties of a WebHook (or egrid Sink) destination.
type DestinationProperties struct {
	// EndpointURL is the webhook URL, query string included: Event Grid users put secrets in
	// it, so reads leave it out when it has a query string or user info.
	EndpointURL string `json:"endpointUrl,omitempty" yaml:"endpointUrl,omitempty"`
	// EndpointBaseURL is read-only: the endpoint URL without query string and user info.
	// Reads fill it in; a PUT may carry it back (it is then only checked, see
	// [Router.CreateSubscription]).
	EndpointBaseURL string `json:"endpointBaseUrl,omitempty" yaml:"endpointBaseUrl,omitempty"`
	// MaxEventsPerBatch (1..5000) and PreferredBatchSizeInKilobytes (1..1024) turn batching
	// on (SPEC §2.3); 0 means unset. Azure's ranges start at 1, so the admin API refuses a
	// body that sends 0 (a Go caller cannot tell 0 from unset, and gets the default).
	MaxEventsPerBatch             int `json:"maxEventsPerBatch,omitempty" yaml:"maxEventsPerBatch,omitempty"`
	PreferredBatchSizeInKilobytes int `json:"preferredBatchSizeInKilobytes,omitempty" yaml:"preferredBatchSizeInKilobytes,omitempty"`
	// DeliveryAttributeMappings are up to 10 custom delivery headers (SPEC §2.4).
	DeliveryAttributeMappings []DeliveryAttributeMapping `json:"deliveryAttributeMappings,omitempty" yaml:"deliveryAttributeMappings,omitempty"`
	// ResponseTimeoutInSeconds is the per-attempt response timeout (egrid; default 30).
	ResponseTimeoutInSeconds int `json:"responseTimeoutInSeconds,omitempty" yaml:"responseTimeoutInSeconds,omitempty"`
	// SkipValidation turns off the endpoint validation handshake of SPEC §2.5 for this
	// WebHook subscription: for trusted internal endpoints that do not implement it (egrid).
	SkipValidation bool `json:"skipValidation,omitempty" yaml:"skipValidation,omitempty"`
	// SinkName names a registered Go sink (endpointType Sink; egrid).
	SinkName string `json:"sinkName,omitempty" yaml:"sinkName,omitempty"`
	// BrokerProperties say where a broker endpointType publishes (egrid; see brokers.go).
	BrokerProperties `yaml:",inline"`
}

// Types of a [DeliveryAttributeMapping].
const (
	MappingStatic  = "Static"
	MappingDynamic = "Dynamic"
)

// DeliveryAttributeMapping is one custom delivery header in ARM's shape
// (eventgrid-behaviour.md §3.4):
//
//	{"name": "X-Api-Key", "type": "Static", "properties": {"value": "...", "isSecret": true}}
//	{"name": "X-Tenant", "type": "Dynamic", "properties": {"sourceField": "data.tenant"}}
type DeliveryAttributeMapping struct {
	// Name is the header name; names starting with "aeg-" are refused.
	Name string `json:"name" yaml:"name"`
	// Type is Static or Dynamic (matched ignoring case).
	Type       string                             `json:"type" yaml:"type"`
	Properties DeliveryAttributeMappingProperties `json:"properties" yaml:"properties"`
}

// DeliveryAttributeMappingProperties are a mapping's properties: Value and IsSecret for a
// Static mapping, SourceField for a Dynamic one.
type DeliveryAttributeMappingProperties struct {
	// Value is a static header's value, at most 4096 bytes. Reads leave it out when IsSecret.
	Value string `json:"value,omitempty" yaml:"value,omitempty"`
	// IsSecret keeps Value out of reads and logs.
	IsSecret bool `json:"isSecret,omitempty" yaml:"isSecret,omitempty"`
	// SourceField is a dynamic header's dotted JSON path into the event, e.g. data.key1; the
	// header is sent when it holds a string, number or boolean.
	SourceField string `json:"sourceField,omitempty" yaml:"sourceField,omitempty"`
}

// String describes the properties without a secret value, so printing a spec with %v does
// not show it.
func (p DeliveryAttributeMappingProperties) String() string {
	switch {
	case p.SourceField != "":
		return "{sourceField: " + p.SourceField + "}"
	case p.IsSecret:
		return "{value: <hidden>, isSecret: true}"
	}
	return "{value: " + p.Value + "}"
}

// RetryPolicy is ARM's retryPolicy plus egrid's profile choice.
type RetryPolicy struct {
	// MaxDeliveryAttempts (1..30; 1..10 for the namespace profile) and
	// EventTimeToLiveInMinutes (1..1440) bound an event's delivery (SPEC §2.1). 0 means unset:
	// the profile's default applies (30 attempts, 1440 minutes), which admin API reads show
	// ([SubscriptionSpec.WithDefaults]). Azure's ranges start at 1,
	// so the admin API refuses a body that sends 0; only a Go caller's zero value means
	// "unset".
	MaxDeliveryAttempts      int `json:"maxDeliveryAttempts,omitempty" yaml:"maxDeliveryAttempts,omitempty"`
	EventTimeToLiveInMinutes int `json:"eventTimeToLiveInMinutes,omitempty" yaml:"eventTimeToLiveInMinutes,omitempty"`
	// Profile is eventgrid (default for custom topics), eventgrid-2019 or namespace (default
	// for namespace topics) (egrid; SPEC §2.1).
	Profile string `json:"profile,omitempty" yaml:"profile,omitempty"`
	// HonorRetryAfter makes a 429 or 503 answer's Retry-After header lengthen the retry delay
	// (capped at the event's remaining time to live). An egrid extension, off by default
	// because Azure documents no Retry-After handling; nil takes the router's
	// [Config.HonorRetryAfter].
	HonorRetryAfter *bool `json:"honorRetryAfter,omitempty" yaml:"honorRetryAfter,omitempty"`
}

// DeadLetterDestination is ARM's deadLetterDestination: a StorageBlob container (a MinIO
// bucket in egrid).
type DeadLetterDestination struct {
	EndpointType string `json:"endpointType" yaml:"endpointType"`
	Properties   struct {
		BlobContainerName string `json:"blobContainerName" yaml:"blobContainerName"`
		ResourceID        string `json:"resourceId,omitempty" yaml:"resourceId,omitempty"`
	} `json:"properties" yaml:"properties"`
}

// WebHook returns a WebHook destination for url.
func WebHook(url string) Destination {
	return Destination{EndpointType: EndpointWebHook, Properties: DestinationProperties{EndpointURL: url}}
}

// SinkDestination returns a destination that delivers to the Go sink registered as name.
func SinkDestination(name string) Destination {
	return Destination{EndpointType: EndpointSink, Properties: DestinationProperties{SinkName: name}}
}

// resolved is a validated subscription spec with its derived values.
type resolved struct {
	deliverySchema schemas.Schema
	filter         *filter.Filter
	policy         *retry.Policy
	endpointType   string
	timeout        time.Duration
	headers        sinks.HeaderMappings
	endpoint       *url.URL // a WebHook's endpoint URL, parsed
	// lockDuration is a queue subscription's receive lock (0: a push subscription).
	lockDuration time.Duration
}

// validate checks the spec against its topic and reports every problem at once.
func (s *SubscriptionSpec) validate(t *TopicSpec, timeScale float64) (*resolved, error) {
	var errs []error
	r := &resolved{}
	queue, errs := s.validateDelivery(t, errs)
	switch {
	case queue:
		r.endpointType = DeliveryModeQueue
		if !reflect.ValueOf(s.Destination).IsZero() {
			errs = append(errs, errors.New("destination: a queue subscription (deliveryConfiguration.deliveryMode Queue) has no destination: consumers receive its events; remove destination, or use deliveryMode Push"))
		}
	case strings.EqualFold(s.Destination.EndpointType, EndpointWebHook):
		r.endpointType = EndpointWebHook
		u, err := validateEndpointURL(s.Destination.Properties.EndpointURL)
		if err != nil {
			errs = append(errs, fmt.Errorf("destination.properties.endpointUrl: %w", err))
		}
		r.endpoint = u
	case strings.EqualFold(s.Destination.EndpointType, EndpointSink):
		r.endpointType = EndpointSink
		if s.Destination.Properties.SinkName == "" {
			errs = append(errs, errors.New("destination.properties.sinkName: required for endpointType Sink"))
		}
	case isBrokerEndpoint(s.Destination.EndpointType):
		r.endpointType, errs = validateBrokerDestination(s.Destination, errs)
	case s.Destination.EndpointType == "":
		errs = append(errs, errors.New("destination.endpointType: required (WebHook or Sink)"))
	default:
		errs = append(errs, fmt.Errorf("destination.endpointType %q is not supported: use WebHook, Sink or a broker (NatsJetStream, RabbitMQ, RedisStream, PostgreSQL, GoChannel)", clip.String(s.Destination.EndpointType)))
	}
	p := s.Destination.Properties
	if p.MaxEventsPerBatch < 0 || p.MaxEventsPerBatch > 5000 {
		errs = append(errs, fmt.Errorf("destination.properties.maxEventsPerBatch %d is out of range: use 1-5000", p.MaxEventsPerBatch))
	}
	if p.PreferredBatchSizeInKilobytes < 0 || p.PreferredBatchSizeInKilobytes > 1024 {
		errs = append(errs, fmt.Errorf("destination.properties.preferredBatchSizeInKilobytes %d is out of range: use 1-1024", p.PreferredBatchSizeInKilobytes))
	}
	if p.ResponseTimeoutInSeconds < 0 || p.ResponseTimeoutInSeconds > 300 {
		errs = append(errs, fmt.Errorf("destination.properties.responseTimeoutInSeconds %d is out of range: use 1-300", p.ResponseTimeoutInSeconds))
	}
	r.timeout = time.Duration(p.ResponseTimeoutInSeconds) * time.Second
	if p.SkipValidation && r.endpointType != EndpointWebHook {
		errs = append(errs, errors.New("destination.properties.skipValidation: applies to endpointType WebHook only"))
	}
	headers, err := headerMappings(p.DeliveryAttributeMappings)
	if err != nil {
		errs = append(errs, err)
	}
	r.headers = headers

	in := t.schema()
	out, err := schemas.ParseDeliverySchema(s.EventDeliverySchema)
	if err != nil {
		errs = append(errs, fmt.Errorf("eventDeliverySchema: %w", err))
	}
	if out == 0 {
		out = in
		if in == schemas.Custom {
			out = schemas.EventGrid
		}
	}
	if in != 0 && out != 0 && !schemas.CanDeliver(in, out) {
		errs = append(errs, fmt.Errorf("eventDeliverySchema %s: events of a topic with input schema %s cannot be delivered in it", out.DeliveryName(), in))
	}
	r.deliverySchema = out

	if f, err := filter.Compile(s.Filter, in); err != nil {
		errs = append(errs, fmt.Errorf("filter: %w", err))
	} else {
		r.filter = f
	}

	profileName := s.RetryPolicy.Profile
	if profileName == "" {
		profileName = "eventgrid"
		if t.Kind == KindNamespace {
			profileName = "namespace"
		}
	}
	profile, err := builtinProfile(profileName)
	if err != nil {
		errs = append(errs, fmt.Errorf("retryPolicy.profile: %w", err))
	} else {
		// Checked in minutes before it becomes a duration, which would wrap: 2^53+30 minutes
		// times a minute is 30 minutes in an int64 of nanoseconds.
		ttl := s.RetryPolicy.EventTimeToLiveInMinutes
		if lo, hi := int(profile.MinTTL/time.Minute), int(profile.MaxTTL/time.Minute); ttl != 0 && (ttl < lo || ttl > hi) {
			errs = append(errs, fmt.Errorf("retryPolicy.eventTimeToLiveInMinutes %d is out of range: use %d-%d for the %s profile (default %d)", ttl, lo, hi, profile.Name, int(profile.DefaultTTL/time.Minute)))
			ttl = 0
		}
		pol := &retry.Policy{
			Profile:             profile,
			MaxDeliveryAttempts: s.RetryPolicy.MaxDeliveryAttempts,
			EventTimeToLive:     time.Duration(ttl) * time.Minute,
			DeadLetter:          s.DeadLetterDestination != nil,
			TimeScale:           timeScale,
		}
		if queue {
			r.lockDuration, pol.MaxDeliveryAttempts, pol.EventTimeToLive = s.queueSettings()
		}
		if err := pol.Validate(); err != nil && !queue { // validateDelivery checked a queue's
			errs = append(errs, fmt.Errorf("retryPolicy: %w", err))
		}
		r.policy = pol
	}
	if d := s.DeadLetterDestination; d != nil {
		if !strings.EqualFold(d.EndpointType, "StorageBlob") {
			errs = append(errs, fmt.Errorf("deadLetterDestination.endpointType %q is not supported: use StorageBlob", clip.String(d.EndpointType)))
		}
		if d.Properties.BlobContainerName == "" {
			errs = append(errs, errors.New("deadLetterDestination.properties.blobContainerName: required"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// validateEndpointURL checks a webhook URL and returns it parsed, for the sink (one parse per
// create). Its messages never repeat the URL: its query string may carry a secret (Event Grid
// hides it on reads too).
func validateEndpointURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("required: set the webhook URL, e.g. https://example.com/events")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("is not a valid URL: use an absolute http or https URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("has scheme %q: use an absolute http or https URL", clip.String(u.Scheme))
	}
	if u.Host == "" {
		return nil, errors.New("has no host: use an absolute http or https URL")
	}
	return u, nil
}

// headerMappings checks ARM delivery attribute mappings and converts them, reporting every
// problem at once with its ARM path. Messages never contain a static value.
func headerMappings(ms []DeliveryAttributeMapping) (sinks.HeaderMappings, error) {
	const path = "destination.properties.deliveryAttributeMappings"
	var errs []error
	out := make(sinks.HeaderMappings, 0, len(ms))
	for i, m := range ms {
		hm := sinks.HeaderMapping{Name: m.Name}
		switch {
		case strings.EqualFold(m.Type, MappingStatic):
			if m.Properties.SourceField != "" {
				errs = append(errs, fmt.Errorf("%s[%d] %q: sourceField applies to Dynamic mappings only: remove it, or use type Dynamic", path, i, clip.String(m.Name)))
			}
			hm.Value = m.Properties.Value
		case strings.EqualFold(m.Type, MappingDynamic):
			if m.Properties.Value != "" || m.Properties.IsSecret {
				errs = append(errs, fmt.Errorf("%s[%d] %q: value and isSecret apply to Static mappings only: remove them, or use type Static", path, i, clip.String(m.Name)))
			}
			if m.Properties.SourceField == "" {
				errs = append(errs, fmt.Errorf("%s[%d] %q: a Dynamic mapping needs properties.sourceField, a JSON path into the event such as data.key1", path, i, clip.String(m.Name)))
				continue
			}
			hm.SourceField = m.Properties.SourceField
		case m.Type == "":
			errs = append(errs, fmt.Errorf("%s[%d] %q: type is required: use Static or Dynamic", path, i, clip.String(m.Name)))
			continue
		default:
			errs = append(errs, fmt.Errorf("%s[%d] %q: type %q is not supported: use Static or Dynamic", path, i, clip.String(m.Name), clip.String(m.Type)))
			continue
		}
		out = append(out, hm)
	}
	if err := out.Validate(); err != nil {
		for _, e := range flatten(err) {
			var he *sinks.HeaderMappingError
			if errors.As(e, &he) && he.Index >= 0 {
				// Point at the ARM index: out skips mappings refused above.
				he = &sinks.HeaderMappingError{Index: armIndex(ms, he.Index), Name: he.Name, Reason: he.Reason}
				errs = append(errs, fmt.Errorf("%s%v", path, he))
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %v", path, e))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// armIndex maps an index into the converted list back to the ARM list it came from.
func armIndex(ms []DeliveryAttributeMapping, i int) int {
	n := -1
	for j, m := range ms {
		if strings.EqualFold(m.Type, MappingStatic) || (strings.EqualFold(m.Type, MappingDynamic) && m.Properties.SourceField != "") {
			n++
		}
		if n == i {
			return j
		}
	}
	return i
}

// flatten lists the errors an errors.Join holds, recursively.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// Bounds of a queue subscription's settings (eventgrid-behaviour.md §3.5).
const (
	DefaultReceiveLockDuration = 60 * time.Second
	minReceiveLockSeconds      = 60
	maxReceiveLockSeconds      = 300
	maxQueueDeliveryCount      = 10
	minQueueTTL                = time.Minute
	maxQueueTTL                = 7 * 24 * time.Hour
)

// validateDelivery checks deliveryConfiguration, appending every problem to errs, and says
// whether the spec is a queue subscription.
func (s *SubscriptionSpec) validateDelivery(t *TopicSpec, errs []error) (bool, []error) {
	dc := s.DeliveryConfiguration
	if dc == nil {
		return false, errs
	}
	queue := false
	switch {
	case dc.DeliveryMode == "" || strings.EqualFold(dc.DeliveryMode, DeliveryModePush):
		if dc.Queue != nil {
			errs = append(errs, errors.New("deliveryConfiguration.queue: applies to deliveryMode Queue only: remove it, or set deliveryMode Queue"))
		}
	case strings.EqualFold(dc.DeliveryMode, DeliveryModeQueue):
		queue = true
	default:
		errs = append(errs, fmt.Errorf("deliveryConfiguration.deliveryMode %q is not supported: use Push or Queue", clip.String(dc.DeliveryMode)))
	}
	if t.Kind != KindNamespace {
		errs = append(errs, errors.New("deliveryConfiguration: applies to namespace topics only (kind: namespace): remove it for a custom topic"))
		return false, errs
	}
	if !queue {
		return false, errs
	}
	if !reflect.ValueOf(s.RetryPolicy).IsZero() {
		errs = append(errs, errors.New("retryPolicy: a queue subscription has none: use deliveryConfiguration.queue.maxDeliveryCount and eventTimeToLive"))
	}
	q := dc.Queue
	if q == nil {
		return true, errs
	}
	const path = "deliveryConfiguration.queue."
	if n := q.ReceiveLockDurationInSeconds; n != 0 && (n < minReceiveLockSeconds || n > maxReceiveLockSeconds) {
		errs = append(errs, fmt.Errorf(path+"receiveLockDurationInSeconds %d is out of range: use %d-%d (default 60)", n, minReceiveLockSeconds, maxReceiveLockSeconds))
	}
	if n := q.MaxDeliveryCount; n < 0 || n > maxQueueDeliveryCount {
		errs = append(errs, fmt.Errorf(path+"maxDeliveryCount %d is out of range: use 1-%d (default 10)", n, maxQueueDeliveryCount))
	}
	if q.EventTimeToLive != "" {
		d, err := ParseISODuration(q.EventTimeToLive)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf(path+"eventTimeToLive: %w", err))
		case d < minQueueTTL || d > maxQueueTTL:
			errs = append(errs, fmt.Errorf(path+"eventTimeToLive %q is out of range: use PT1M to P7D", clip.String(q.EventTimeToLive)))
		case d%time.Minute != 0:
			errs = append(errs, fmt.Errorf(path+"eventTimeToLive %q is not whole minutes: use minute precision, e.g. PT23H12M", clip.String(q.EventTimeToLive)))
		}
	}
	return true, errs
}

// queueSettings returns a validated queue subscription's lock duration, maxDeliveryCount
// (0: the profile's default) and time to live (0: the profile's default).
func (s *SubscriptionSpec) queueSettings() (lock time.Duration, maxCount int, ttl time.Duration) {
	lock = DefaultReceiveLockDuration
	q := s.DeliveryConfiguration.Queue
	if q == nil {
		return lock, 0, 0
	}
	if q.ReceiveLockDurationInSeconds > 0 {
		lock = time.Duration(q.ReceiveLockDurationInSeconds) * time.Second
	}
	ttl, _ = ParseISODuration(q.EventTimeToLive)
	return lock, q.MaxDeliveryCount, ttl
}

// ParseISODuration parses an ISO 8601 duration of days, hours, minutes and seconds, as Azure
// writes a namespace subscription's eventTimeToLive: P1D, PT23H12M, P0DT23H12M, P1DT0H0M0S,
// P1W. Years and months are refused (their length varies); an empty string is 0.
func ParseISODuration(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	bad := func(why string) (time.Duration, error) {
		return 0, fmt.Errorf("%q is not an ISO 8601 duration (%s): write it like PT30M, PT23H12M, P1D or P1DT12H", clip.String(v), why)
	}
	s := strings.ToUpper(v)
	if !strings.HasPrefix(s, "P") || len(s) < 3 {
		return bad("it must start with P and hold at least one number and unit")
	}
	s = s[1:]
	var total time.Duration
	inTime, seen := false, false
	last := -1 // the rank of the last unit: W D H M S, each at most once and in that order
	for len(s) > 0 {
		if s[0] == 'T' {
			if inTime {
				return bad("T appears twice")
			}
			inTime, s = true, s[1:]
			if s == "" {
				return bad("nothing follows T")
			}
			continue
		}
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 || i == len(s) {
			return bad("each unit needs a whole number before it")
		}
		n, err := strconv.ParseInt(s[:i], 10, 32)
		if err != nil {
			return bad("a number is too large")
		}
		var unit time.Duration
		rank := 0
		switch u := s[i]; {
		case u == 'W' && !inTime:
			unit, rank = 7*24*time.Hour, 0
		case u == 'D' && !inTime:
			unit, rank = 24*time.Hour, 1
		case u == 'H' && inTime:
			unit, rank = time.Hour, 2
		case u == 'M' && inTime:
			unit, rank = time.Minute, 3
		case u == 'S' && inTime:
			unit, rank = time.Second, 4
		case u == 'Y' || (u == 'M' && !inTime):
			return bad("years and months are not supported: use days")
		default:
			return bad(fmt.Sprintf("unit %q is not one of D before T, or H, M, S after T", string(u)))
		}
		if rank <= last {
			return bad(fmt.Sprintf("unit %q is given twice or out of order (W, D, then after T: H, M, S)", string(s[i])))
		}
		last = rank
		total += time.Duration(n) * unit
		if total > 366*24*time.Hour {
			return bad("it is longer than a year")
		}
		seen, s = true, s[i+1:]
	}
	if !seen {
		return bad("it holds no number")
	}
	return total, nil
}

// WithDefaults returns the spec with the defaults Event Grid shows on a read filled in, for a
// subscription of topic t: retryPolicy.maxDeliveryAttempts and eventTimeToLiveInMinutes (the
// retry profile's, 30 and 1440 for a custom topic) and eventDeliverySchema (the topic's
// input schema; EventGridSchema for a custom input schema). Azure's GET returns these
// effective values ("retryPolicy": {"maxDeliveryAttempts": 30, "eventTimeToLiveInMinutes":
// 1440}, "eventDeliverySchema": "EventGridSchema" in the Microsoft.EventGrid REST API's
// EventSubscriptions_Get examples); the admin API reads with them, and a read PUT back is taken
// as the same settings. A queue subscription, whose limits are in deliveryConfiguration.queue,
// and a spec whose values are invalid are returned as they are.
func (s SubscriptionSpec) WithDefaults(t TopicSpec) SubscriptionSpec {
	if s.IsQueue() {
		return s
	}
	if s.EventDeliverySchema == "" {
		if out := t.schema(); out != 0 {
			if out == schemas.Custom {
				out = schemas.EventGrid
			}
			s.EventDeliverySchema = out.DeliveryName()
		}
	}
	if _, err := retry.ProfileByName(s.RetryPolicy.Profile); err != nil {
		return s
	}
	lim := s.RetryLimits(t)
	if s.RetryPolicy.MaxDeliveryAttempts == 0 {
		s.RetryPolicy.MaxDeliveryAttempts = lim.DefaultAttempts
	}
	if s.RetryPolicy.EventTimeToLiveInMinutes == 0 {
		s.RetryPolicy.EventTimeToLiveInMinutes = lim.DefaultTTL
	}
	return s
}

// RetryLimits are the ranges a subscription's retryPolicy takes under its retry profile, in
// the units of the ARM properties, for messages about them.
type RetryLimits struct {
	// Profile is the profile's name.
	Profile string
	// MaxAttempts and DefaultAttempts bound maxDeliveryAttempts (1..MaxAttempts).
	MaxAttempts, DefaultAttempts int
	// MinTTL, MaxTTL and DefaultTTL bound eventTimeToLiveInMinutes, in minutes.
	MinTTL, MaxTTL, DefaultTTL int
}

// RetryLimits returns the ranges of the retry profile the spec uses on topic t: its
// retryPolicy.profile, or the topic's default (namespace on a namespace topic, else
// eventgrid). An unknown profile gives the eventgrid profile's (the profile itself is
// reported when the spec is checked).
func (s SubscriptionSpec) RetryLimits(t TopicSpec) RetryLimits {
	name := s.RetryPolicy.Profile
	if name == "" && strings.EqualFold(t.Kind, KindNamespace) {
		name = retry.NameNamespace
	}
	p, err := retry.ProfileByName(name)
	if err != nil {
		p = retry.EventGrid()
	}
	return RetryLimits{
		Profile: p.Name, MaxAttempts: p.MaxAttemptsLimit, DefaultAttempts: p.DefaultMaxAttempts,
		MinTTL: int(p.MinTTL / time.Minute), MaxTTL: int(p.MaxTTL / time.Minute), DefaultTTL: int(p.DefaultTTL / time.Minute),
	}
}
