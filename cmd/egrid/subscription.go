package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/schemas/clip"
)

// armSubscription is an event subscription as the admin API returns it: the fields the table
// and update use, decoded, and the whole object as the server sent it (id, type, ...), which
// -o json prints.
type armSubscription struct {
	Name       string `json:"name"`
	Properties struct {
		router.SubscriptionSpec
		Topic               string `json:"topic,omitempty"`
		ProvisioningState   string `json:"provisioningState,omitempty"`
		ProvisioningMessage string `json:"provisioningMessage,omitempty"`
		// DeliveryState's fields are pointers: while the subscription loads its stored state
		// the server sends only loading and loadingSince, and -o json shows just those.
		DeliveryState *struct {
			Backlog                     *int      `json:"backlog,omitempty"`
			InFlight                    *int      `json:"inFlight,omitempty"`
			OldestUndeliveredAgeSeconds *float64  `json:"oldestUndeliveredAgeSeconds,omitempty"`
			Probation                   *bool     `json:"probation,omitempty"`
			ProbationCause              string    `json:"probationCause,omitempty"`
			Loading                     bool      `json:"loading,omitempty"`
			LoadingSince                time.Time `json:"loadingSince,omitzero"`
		} `json:"deliveryState,omitempty"`
	} `json:"properties"`
	answered json.RawMessage
}

func (s *armSubscription) UnmarshalJSON(b []byte) error {
	type fields armSubscription // without the methods
	return keepAnswer(b, (*fields)(s), &s.answered)
}

func (s armSubscription) MarshalJSON() ([]byte, error) {
	type fields armSubscription
	return answerJSON(s.answered, fields(s))
}

// Multi-word flags. `az eventgrid` takes several words after them (--advanced-filter data.n
// NumberGreaterThan 5); urfave/cli takes one value per flag. egrid accepts both: the words of
// one flag are joined into its value by joinFlagWords before parsing, separated by wordSep,
// and a value given as one quoted string is split on spaces.
const (
	flagIncludedEventTypes = "included-event-types"
	flagAdvancedFilter     = "advanced-filter"
	flagMapping            = "delivery-attribute-mapping"
	flagLabels             = "labels"

	wordSep = "\x1f"
)

var (
	multiWordFlags = map[string]bool{"--" + flagIncludedEventTypes: true, "--" + flagAdvancedFilter: true, "--" + flagMapping: true, "--" + flagLabels: true}
	// boolWordFlags are boolean flags az writes with a value word (--subject-case-sensitive true).
	boolWordFlags = map[string]bool{"--subject-case-sensitive": true, "--enable-advanced-filtering-on-arrays": true, "--skip-validation": true}
)

// joinFlagWords rewrites az-style arguments for urfave/cli: the words after a multi-word flag,
// up to the next flag, become its one value (--labels a b → --labels=a<sep>b), and a true/false
// word after a boolean flag becomes its value. A word starting with "-" ends the list unless it
// is a number (a filter value such as -5).
func joinFlagWords(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i:]...)
		case multiWordFlags[a]:
			var words []string
			for i+1 < len(args) && !looksLikeFlag(args[i+1]) {
				words = append(words, args[i+1])
				i++
			}
			if len(words) == 0 {
				out = append(out, a) // let cli say the value is missing
				continue
			}
			out = append(out, a+"="+strings.Join(words, wordSep))
		case boolWordFlags[a] && i+1 < len(args) && (strings.EqualFold(args[i+1], "true") || strings.EqualFold(args[i+1], "false")):
			out = append(out, a+"="+strings.ToLower(args[i+1]))
			i++
		default:
			out = append(out, a)
		}
	}
	return out
}

func looksLikeFlag(s string) bool {
	if len(s) < 2 || s[0] != '-' {
		return false
	}
	_, err := strconv.ParseFloat(s, 64)
	return err != nil
}

// words splits one flag value into its words (see joinFlagWords).
func words(v string) []string {
	if strings.Contains(v, wordSep) {
		return strings.Split(v, wordSep)
	}
	return strings.Fields(v)
}

// occurrences is a repeatable flag that keeps each occurrence whole (a StringSliceFlag would
// split values on commas, which filter values may hold).
type occurrences []string

// Set appends one occurrence.
func (o *occurrences) Set(v string) error { *o = append(*o, v); return nil }

// String lists the occurrences.
func (o *occurrences) String() string {
	if o == nil {
		return ""
	}
	return strings.Join(*o, " | ")
}

func occurrencesOf(c *cli.Context, name string) []string {
	if o, ok := c.Generic(name).(*occurrences); ok && o != nil {
		return *o
	}
	return nil
}

// subscriptionFlags are the az-named flags of create and update.
func subscriptionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "endpoint", Usage: "Endpoint where egrid delivers the events that match the event subscription: an http or https URL. Its query string is kept secret: reads never return it."},
		&cli.StringFlag{Name: "endpoint-type", Usage: "Type of the destination endpoint: webhook.", DefaultText: "webhook"},
		&cli.GenericFlag{Name: flagIncludedEventTypes, Usage: "Event types to deliver, as words or a quoted space-separated list (default: all types). Example: --included-event-types Order.Created Order.Shipped", Value: &occurrences{}},
		&cli.StringFlag{Name: "subject-begins-with", Usage: "Deliver only events whose subject begins with this literal prefix (no wildcards)."},
		&cli.StringFlag{Name: "subject-ends-with", Usage: "Deliver only events whose subject ends with this literal suffix (no wildcards)."},
		&cli.BoolFlag{Name: "subject-case-sensitive", Usage: "Compare --subject-begins-with and --subject-ends-with case-sensitively: true or false.", DefaultText: "false"},
		&cli.GenericFlag{Name: flagAdvancedFilter, Usage: "An advanced filter: KEY OPERATOR [VALUE ...], as words or one quoted string split on spaces; repeat the flag for more filters (at most 25). " +
			"Ranges are lo,hi. Examples: --advanced-filter data.n NumberGreaterThan 5; --advanced-filter \"subject StringBeginsWith /orders/ /carts/\"; --advanced-filter data.n NumberInRange 1,10 20,30", Value: &occurrences{}},
		&cli.BoolFlag{Name: "enable-advanced-filtering-on-arrays", Usage: "Let advanced filters test array values element by element: true or false.", DefaultText: "false"},
		&cli.IntFlag{Name: "max-delivery-attempts", Usage: "Maximum number of delivery attempts for an event, 1-30.", DefaultText: "30"},
		&cli.StringFlag{Name: "event-ttl", Usage: "Event time to live: minutes, 1-1440, for a push subscription; for --delivery-mode queue an ISO 8601 duration PT1M-P7D (e.g. PT1H, P1D) or minutes.", DefaultText: "1440 (queue: P1D)"},
		&cli.IntFlag{Name: "max-events-per-batch", Usage: "Maximum number of events in a batch, 1-5000. Setting it turns batching on.", DefaultText: "batching off"},
		&cli.IntFlag{Name: "preferred-batch-size-in-kilobytes", Usage: "Preferred batch size in kilobytes, 1-1024. Setting it turns batching on.", DefaultText: "batching off"},
		&cli.StringFlag{Name: "deadletter-container", Usage: "MinIO bucket that receives the events that cannot be delivered. Empty turns dead-lettering off (update)."},
		&cli.GenericFlag{Name: flagMapping, Usage: "A delivery attribute mapping (custom header): NAME static VALUE [true|false] or NAME dynamic JSON-PATH, as words or one quoted string; " +
			"the last word of a static mapping says whether the value is secret (default false). Repeat the flag for more headers (at most 10). " +
			"Examples: --delivery-attribute-mapping X-Api-Key static s3cr3t true; --delivery-attribute-mapping X-Tenant dynamic data.tenant", Value: &occurrences{}},
		&cli.StringFlag{Name: "event-delivery-schema", Usage: "Schema of the delivered events: EventGridSchema, CloudEventSchemaV1_0 or CustomInputSchema.", DefaultText: "the topic's input schema"},
		&cli.StringFlag{Name: "expiration-date", Usage: "Date or datetime (UTC unless it names a zone) after which the event subscription is deleted, e.g. 2030-01-31 or 2030-01-31T18:00:00Z. Empty removes it (update)."},
		&cli.GenericFlag{Name: flagLabels, Usage: "Labels of the event subscription, as words or a quoted space-separated list.", Value: &occurrences{}},
		&cli.StringFlag{Name: "retry-profile", Usage: "Retry schedule (egrid): eventgrid, eventgrid-2019 or namespace.", DefaultText: "eventgrid"},
		&cli.BoolFlag{Name: "skip-validation", Usage: "Do not run the endpoint validation handshake (egrid): for trusted internal endpoints that do not implement it."},
		&cli.StringFlag{Name: "delivery-mode", Usage: "Delivery mode of a namespace topic's event subscription: push (to --endpoint) or queue (consumers pull with :receive; no endpoint).", DefaultText: "push"},
		&cli.IntFlag{Name: "receive-lock-duration", Usage: "Queue subscriptions: seconds a received event stays locked to its receiver unless it is settled, 60-300.", DefaultText: "60"},
		&cli.IntFlag{Name: "max-delivery-count", Usage: "Queue subscriptions: times an event may be received before it is dead-lettered (or dropped), 1-10.", DefaultText: "10"},
	}
}

const subscriptionDescription = `Event subscriptions route the events of a topic to an endpoint, with Azure Event Grid's
property names and semantics. Multi-word flags (--included-event-types, --advanced-filter,
--delivery-attribute-mapping, --labels) take several words as az does, or one quoted string
split on spaces; repeat --advanced-filter and --delivery-attribute-mapping for more.`

func subscriptionCommand(e env) *cli.Command {
	topicFlag := &cli.StringFlag{Name: "topic", Usage: "Name of the topic.", Required: true}
	nameFlag := &cli.StringFlag{Name: "name", Aliases: []string{"n"}, Usage: "Name of the event subscription.", Required: true}
	path := func(c *cli.Context) string {
		return subscriptionPath(c.String("topic"), c.String("name"))
	}
	put := func(c *cli.Context, spec router.SubscriptionSpec) error {
		var out armSubscription
		if err := newClient(c, e).do(http.MethodPut, path(c), map[string]any{"properties": spec}, &out); err != nil {
			return err
		}
		return printSubscriptions(e, c.String("output"), out)
	}
	return &cli.Command{
		Name:        "event-subscription",
		Usage:       "Manage event subscriptions.",
		Description: subscriptionDescription,
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "Create a new event subscription.",
				Description: `Creates (or replaces) an event subscription. A webhook endpoint is validated first, as Event
Grid does: it must answer the SubscriptionValidation event with its validationCode (or GET the
validationUrl within 10 minutes), or, for --event-delivery-schema CloudEventSchemaV1_0, consent
to the OPTIONS abuse-protection request.

Examples:
   Create an event subscription to a webhook, with default filters.
       egrid event-subscription create --topic orders --name billing \
           --endpoint https://billing.example.com/api/events

   Deliver Order.Created events whose data.amount is over 100, in batches, with a secret header.
       egrid event-subscription create --topic orders --name big-orders \
           --endpoint https://example.com/hook --included-event-types Order.Created \
           --advanced-filter data.amount NumberGreaterThan 100 \
           --max-events-per-batch 10 --preferred-batch-size-in-kilobytes 64 \
           --delivery-attribute-mapping X-Api-Key static s3cr3t true

   Retry for an hour at most, then dead-letter to a bucket; expire the subscription.
       egrid event-subscription create --topic orders --name audit \
           --endpoint https://example.com/audit --max-delivery-attempts 10 --event-ttl 60 \
           --deadletter-container audit-dead-letters --expiration-date 2030-01-31

   A queue subscription of a namespace topic, for consumers that pull (egrid receive --pull).
       egrid event-subscription create --topic ns-orders --name workers \
           --delivery-mode queue --receive-lock-duration 60 --max-delivery-count 10 --event-ttl PT1H`,
				Flags: append(append(serverFlags(), topicFlag, nameFlag, outputFlag()), subscriptionFlags()...),
				Action: func(c *cli.Context) error {
					queue := strings.EqualFold(c.String("delivery-mode"), router.DeliveryModeQueue)
					if c.String("endpoint") == "" && !queue {
						return cli.Exit("--endpoint is required: the URL events are delivered to (or --delivery-mode queue on a namespace topic, for consumers that pull)", 2)
					}
					spec := router.SubscriptionSpec{}
					if !queue {
						spec.Destination = router.Destination{EndpointType: "webhook"}
					}
					if err := applyFlags(c, &spec); err != nil {
						return cli.Exit(err.Error(), 2)
					}
					return put(c, spec)
				},
			},
			{
				Name:  "update",
				Usage: "Update an event subscription.",
				Description: `Changes only the properties whose flags are given; the others keep their values (egrid reads
the event subscription, applies the flags and writes it back). Secret values — the endpoint's
query string, secret headers — are kept unless the flags replace them. --advanced-filter,
--delivery-attribute-mapping, --included-event-types and --labels replace the whole list.

Examples:
   Change the endpoint of an event subscription.
       egrid event-subscription update --topic orders --name billing \
           --endpoint https://billing2.example.com/api/events

   Replace the advanced filters and the labels.
       egrid event-subscription update --topic orders --name billing \
           --advanced-filter data.region StringIn eu us --labels prod billing`,
				Flags: append(append(serverFlags(), topicFlag, nameFlag, outputFlag()), subscriptionFlags()...),
				Action: func(c *cli.Context) error {
					cl := newClient(c, e)
					var cur armSubscription
					if err := cl.do(http.MethodGet, path(c), nil, &cur); err != nil {
						return err
					}
					spec := cur.Properties.SubscriptionSpec
					if err := applyFlags(c, &spec); err != nil {
						return cli.Exit(err.Error(), 2)
					}
					return put(c, spec)
				},
			},
			{
				Name:  "show",
				Usage: "Get the details of an event subscription.",
				Description: `Shows an event subscription with its provisioning state and delivery state (backlog, oldest
undelivered event, probation). Secrets are not shown. While the subscription reads its stored
state (after a restart of the server or an update), the delivery state says "loading its state
since" a time instead: it is not known yet.

Examples:
   Show an event subscription.
       egrid event-subscription show --topic orders --name billing

   Show it as JSON, as the admin API returns it.
       egrid event-subscription show --topic orders --name billing -o json`,
				Flags: append(serverFlags(), topicFlag, nameFlag, outputFlag()),
				Action: func(c *cli.Context) error {
					var out armSubscription
					if err := newClient(c, e).do(http.MethodGet, path(c), nil, &out); err != nil {
						return err
					}
					return printSubscriptions(e, c.String("output"), out)
				},
			},
			{
				Name:  "list",
				Usage: "List the event subscriptions of a topic.",
				Description: `Examples:
   List the event subscriptions of a topic.
       egrid event-subscription list --topic orders`,
				Flags: append(serverFlags(), topicFlag, outputFlag()),
				Action: func(c *cli.Context) error {
					var out struct{ Value []armSubscription }
					if err := newClient(c, e).do(http.MethodGet, topicPath(c.String("topic"))+"/eventSubscriptions", nil, &out); err != nil {
						return err
					}
					return printList(e, c.String("output"), out.Value, printSubscriptions)
				},
			},
			{
				Name:  "delete",
				Usage: "Delete an event subscription.",
				Description: `Deletes the event subscription and its delivery state; events not yet delivered to it are
dropped.

Examples:
   Delete an event subscription.
       egrid event-subscription delete --topic orders --name billing`,
				Flags: append(serverFlags(), topicFlag, nameFlag),
				Action: func(c *cli.Context) error {
					if err := newClient(c, e).do(http.MethodDelete, path(c), nil, nil); err != nil {
						return err
					}
					fmt.Fprintln(e.Stdout, "deleted event subscription", termSafe(c.String("name")))
					return nil
				},
			},
		},
	}
}

// zeroFlags are the numeric flags whose setting takes 0 for "not set" (the ARM body leaves a
// 0 out, and the default applies): an explicit 0 is refused with the flag's range instead, as
// the admin API refuses a 0 in the body (Azure's ranges start at 1).
var zeroFlags = []struct{ name, use string }{
	{"max-delivery-attempts", "1-30 (1-10 with the namespace retry profile, a namespace topic's default)"},
	{"max-events-per-batch", "1-5000 (without the flag, one event per request)"},
	{"preferred-batch-size-in-kilobytes", "1-1024 (without the flag, one event per request)"},
	{"receive-lock-duration", "60-300 seconds"},
	{"max-delivery-count", "1-10"},
}

// explicitZeroFlags reports each numeric flag given as 0 (zeroFlags, and --event-ttl's minutes),
// naming the flag and its range.
func explicitZeroFlags(c *cli.Context) []string {
	var errs []string
	for _, f := range zeroFlags {
		if c.IsSet(f.name) && c.Int(f.name) == 0 {
			errs = append(errs, fmt.Sprintf("--%s 0 is out of range: use %s, or leave the flag out", f.name, f.use))
		}
	}
	if c.IsSet("event-ttl") {
		if minutes, err := strconv.Atoi(strings.TrimSpace(c.String("event-ttl"))); err == nil && minutes == 0 {
			errs = append(errs, "--event-ttl 0 is out of range: use 1-1440 minutes for a push subscription (up to 10080 with the namespace retry profile), or for --delivery-mode queue an ISO 8601 duration PT1M-P7D; or leave the flag out")
		}
	}
	return errs
}

// applyFlags sets the properties whose flags are given on spec, and reports every flag value
// it cannot read at once. Values the server checks (ranges, names) are passed on as given,
// except an explicit 0, which the body cannot carry (explicitZeroFlags).
func applyFlags(c *cli.Context, spec *router.SubscriptionSpec) error {
	errs := explicitZeroFlags(c)
	p := &spec.Destination.Properties
	if c.IsSet("endpoint") {
		p.EndpointURL, p.EndpointBaseURL = c.String("endpoint"), ""
	}
	if c.IsSet("endpoint-type") {
		spec.Destination.EndpointType = c.String("endpoint-type")
	}
	if c.IsSet("max-events-per-batch") {
		p.MaxEventsPerBatch = c.Int("max-events-per-batch")
	}
	if c.IsSet("preferred-batch-size-in-kilobytes") {
		p.PreferredBatchSizeInKilobytes = c.Int("preferred-batch-size-in-kilobytes")
	}
	if c.IsSet("skip-validation") {
		p.SkipValidation = c.Bool("skip-validation")
	}
	if c.IsSet(flagMapping) {
		p.DeliveryAttributeMappings = nil
		for _, v := range occurrencesOf(c, flagMapping) {
			m, err := parseMapping(words(v))
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			p.DeliveryAttributeMappings = append(p.DeliveryAttributeMappings, m)
		}
	}

	f := &spec.Filter
	if c.IsSet(flagIncludedEventTypes) {
		f.IncludedEventTypes = nil
		for _, v := range occurrencesOf(c, flagIncludedEventTypes) {
			f.IncludedEventTypes = append(f.IncludedEventTypes, words(v)...)
		}
	}
	if c.IsSet("subject-begins-with") {
		f.SubjectBeginsWith = c.String("subject-begins-with")
	}
	if c.IsSet("subject-ends-with") {
		f.SubjectEndsWith = c.String("subject-ends-with")
	}
	if c.IsSet("subject-case-sensitive") {
		f.IsSubjectCaseSensitive = c.Bool("subject-case-sensitive")
	}
	if c.IsSet("enable-advanced-filtering-on-arrays") {
		f.EnableAdvancedFilteringOnArrays = c.Bool("enable-advanced-filtering-on-arrays")
	}
	if c.IsSet(flagAdvancedFilter) {
		f.AdvancedFilters = nil
		for _, v := range occurrencesOf(c, flagAdvancedFilter) {
			af, err := parseAdvancedFilter(words(v))
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			f.AdvancedFilters = append(f.AdvancedFilters, af)
		}
	}

	errs = append(errs, applyDeliveryFlags(c, spec)...)
	if c.IsSet("max-delivery-attempts") {
		spec.RetryPolicy.MaxDeliveryAttempts = c.Int("max-delivery-attempts")
	}
	if c.IsSet("retry-profile") {
		spec.RetryPolicy.Profile = c.String("retry-profile")
	}
	if c.IsSet("deadletter-container") {
		spec.DeadLetterDestination = nil
		if b := c.String("deadletter-container"); b != "" {
			spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
			spec.DeadLetterDestination.Properties.BlobContainerName = b
		}
	}
	if c.IsSet("event-delivery-schema") {
		spec.EventDeliverySchema = c.String("event-delivery-schema")
	}
	if c.IsSet("expiration-date") {
		t, err := parseExpiration(c.String("expiration-date"))
		if err != nil {
			errs = append(errs, err.Error())
		}
		spec.ExpirationTimeUTC = t
	}
	if c.IsSet(flagLabels) {
		spec.Labels = nil
		for _, v := range occurrencesOf(c, flagLabels) {
			spec.Labels = append(spec.Labels, words(v)...)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// applyDeliveryFlags sets the delivery mode, the queue settings and the time to live. A queue
// subscription (deliveryConfiguration.deliveryMode Queue, eventgrid-behaviour.md §3.5) keeps
// its time to live as an ISO 8601 duration in deliveryConfiguration.queue.eventTimeToLive, a
// push subscription as minutes in retryPolicy.eventTimeToLiveInMinutes, so --event-ttl takes
// either form and goes where the subscription's mode says. Switching to push drops the
// queue settings; switching to queue drops the destination (a queue has none).
func applyDeliveryFlags(c *cli.Context, spec *router.SubscriptionSpec) []string {
	var errs []string
	if c.IsSet("delivery-mode") {
		switch m := c.String("delivery-mode"); {
		case strings.EqualFold(m, router.DeliveryModeQueue):
			if !spec.IsQueue() {
				spec.DeliveryConfiguration = &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}
			}
			if !c.IsSet("endpoint") {
				spec.Destination = router.Destination{}
			}
		case strings.EqualFold(m, router.DeliveryModePush):
			spec.DeliveryConfiguration = nil
		default:
			errs = append(errs, fmt.Sprintf("--delivery-mode %q: use push or queue", clip.String(m)))
		}
	}
	queue := spec.IsQueue()
	q := func() *router.QueueInfo {
		if spec.DeliveryConfiguration.Queue == nil {
			spec.DeliveryConfiguration.Queue = &router.QueueInfo{}
		}
		return spec.DeliveryConfiguration.Queue
	}
	for _, name := range []string{"receive-lock-duration", "max-delivery-count"} {
		if c.IsSet(name) && !queue {
			errs = append(errs, fmt.Sprintf("--%s: applies to queue subscriptions only: add --delivery-mode queue (push subscriptions take --max-delivery-attempts)", name))
		}
	}
	if queue && c.IsSet("receive-lock-duration") {
		q().ReceiveLockDurationInSeconds = c.Int("receive-lock-duration")
	}
	if queue && c.IsSet("max-delivery-count") {
		q().MaxDeliveryCount = c.Int("max-delivery-count")
	}
	if c.IsSet("event-ttl") {
		v := strings.TrimSpace(c.String("event-ttl"))
		minutes, err := strconv.Atoi(v)
		switch {
		case queue && err == nil:
			q().EventTimeToLive = fmt.Sprintf("PT%dM", minutes)
		case queue:
			q().EventTimeToLive = v // the server checks the duration and its range
		case err != nil:
			errs = append(errs, fmt.Sprintf("--event-ttl %q: a push subscription takes whole minutes, 1-1440 (an ISO 8601 duration is for --delivery-mode queue)", clip.String(v)))
		default:
			spec.RetryPolicy.EventTimeToLiveInMinutes = minutes
		}
	}
	return errs
}

// parseAdvancedFilter reads KEY OPERATOR [VALUE ...]. Values are typed by the operator: numbers
// for NumberX, a bool for BoolEquals, lo,hi pairs for the ranges, strings otherwise; a value
// that does not parse is passed on as a string, so the server names the filter at fault.
func parseAdvancedFilter(w []string) (filter.AdvancedFilter, error) {
	if len(w) < 2 {
		return filter.AdvancedFilter{}, fmt.Errorf("--advanced-filter %q: write KEY OPERATOR [VALUE ...], e.g. data.n NumberGreaterThan 5", clip.String(strings.Join(w, " ")))
	}
	af := filter.AdvancedFilter{Key: w[0], OperatorType: w[1]}
	op, err := filter.ParseOperator(w[1])
	if err != nil {
		return af, fmt.Errorf("--advanced-filter %q: %v", clip.String(strings.Join(w, " ")), err)
	}
	vals := w[2:]
	number := func(s string) any {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return f
		}
		return s
	}
	switch op {
	case filter.IsNullOrUndefined, filter.IsNotNull:
		if len(vals) > 0 {
			return af, fmt.Errorf("--advanced-filter %q: %s takes no values", clip.String(strings.Join(w, " ")), op)
		}
	case filter.NumberLessThan, filter.NumberGreaterThan, filter.NumberLessThanOrEquals, filter.NumberGreaterThanOrEquals, filter.BoolEquals:
		if len(vals) != 1 {
			return af, fmt.Errorf("--advanced-filter %q: %s takes exactly one value", clip.String(strings.Join(w, " ")), op)
		}
		if op == filter.BoolEquals {
			if b, err := strconv.ParseBool(vals[0]); err == nil {
				af.Value = b
			} else {
				af.Value = vals[0]
			}
		} else {
			af.Value = number(vals[0])
		}
	case filter.NumberIn, filter.NumberNotIn:
		for _, v := range vals {
			af.Values = append(af.Values, number(v))
		}
	case filter.NumberInRange, filter.NumberNotInRange:
		for _, v := range vals {
			lo, hi, ok := strings.Cut(v, ",")
			if !ok {
				return af, fmt.Errorf("--advanced-filter %q: write each range of %s as lo,hi (e.g. 1,10)", clip.String(strings.Join(w, " ")), op)
			}
			af.Values = append(af.Values, []any{number(lo), number(hi)})
		}
	default:
		for _, v := range vals {
			af.Values = append(af.Values, v)
		}
	}
	return af, nil
}

// parseMapping reads NAME static VALUE [true|false] or NAME dynamic PATH. A static value given
// inside one quoted string may hold spaces: every word between "static" and a final true/false
// belongs to it.
func parseMapping(w []string) (router.DeliveryAttributeMapping, error) {
	usage := func() error {
		// The value is not repeated: it may be a secret.
		return fmt.Errorf("--delivery-attribute-mapping: write NAME static VALUE [true|false] or NAME dynamic JSON-PATH (got %d words)", len(w))
	}
	if len(w) < 3 {
		return router.DeliveryAttributeMapping{}, usage()
	}
	m := router.DeliveryAttributeMapping{Name: w[0]}
	switch strings.ToLower(w[1]) {
	case "static":
		m.Type = router.MappingStatic
		vals := w[2:]
		if last := strings.ToLower(vals[len(vals)-1]); len(vals) > 1 && (last == "true" || last == "false") {
			m.Properties.IsSecret = last == "true"
			vals = vals[:len(vals)-1]
		}
		m.Properties.Value = strings.Join(vals, " ")
	case "dynamic":
		if len(w) != 3 {
			return m, usage()
		}
		m.Type = router.MappingDynamic
		m.Properties.SourceField = w[2]
	default:
		return m, fmt.Errorf("--delivery-attribute-mapping %q: the second word is static or dynamic", clip.String(w[0]))
	}
	return m, nil
}

// parseExpiration reads --expiration-date as az does: a date or a datetime, UTC unless it names
// a zone. Empty gives the zero time (no expiration).
func parseExpiration(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("--expiration-date %q: use a date or datetime such as 2030-01-31 or 2030-01-31T18:00:00Z", clip.String(v))
}

// printSubscriptions prints one subscription (in JSON an object) or several (an array).
func printSubscriptions(e env, format string, subs ...armSubscription) error {
	if format == "json" {
		if len(subs) == 1 {
			return printJSON(e.Stdout, subs[0])
		}
		return printJSON(e.Stdout, subs)
	}
	tab := newTable("NAME", "PROVISIONING STATE", "TYPE", "ENDPOINT", "DELIVERY")
	for _, s := range subs {
		state := ""
		if ds := s.Properties.DeliveryState; ds != nil && ds.Loading {
			state = "loading its state since " + ds.LoadingSince.UTC().Format(time.RFC3339)
		} else if ds != nil {
			state = fmt.Sprintf("backlog=%d inFlight=%d", deref(ds.Backlog), deref(ds.InFlight))
			if deref(ds.Probation) {
				state += " probation=" + ds.ProbationCause
			}
		}
		d := s.Properties.Destination
		endpoint := d.Properties.EndpointURL
		if endpoint == "" {
			endpoint = d.Properties.EndpointBaseURL // the URL has a secret query string
		}
		if endpoint == "" {
			endpoint = d.Properties.SinkName
		}
		typ := d.EndpointType
		if s.Properties.IsQueue() {
			typ, endpoint = router.DeliveryModeQueue, "(consumers pull: egrid receive --pull)"
		}
		prov := s.Properties.ProvisioningState
		if prov == "" {
			prov = "-"
		}
		tab.row(s.Name, prov, typ, endpoint, state)
		if msg := s.Properties.ProvisioningMessage; msg != "" {
			tab.note(msg)
		}
	}
	return tab.write(e.Stdout)
}

// deref is *p, or the zero value when p is nil (a field the server left out).
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
