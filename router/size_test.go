package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas/clip"
)

// sizeCase is one size bound of a subscription definition: set puts n units (characters,
// bytes or entries) into a spec; want is what the refusal of limit+1 says.
type sizeCase struct {
	name  string
	limit int
	set   func(s *router.SubscriptionSpec, n int)
	want  string
}

func sizeCases() []sizeCase {
	list := func(n int, each string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d", each, i)
		}
		return out
	}
	return []sizeCase{
		{"subjectBeginsWith", filter.MaxSubjectFilterLength, func(s *router.SubscriptionSpec, n int) { s.Filter.SubjectBeginsWith = strings.Repeat("é", n) },
			"filter: subjectBeginsWith: too long: 1025 characters, at most 1024 are allowed"},
		{"subjectEndsWith", filter.MaxSubjectFilterLength, func(s *router.SubscriptionSpec, n int) { s.Filter.SubjectEndsWith = strings.Repeat("s", n) },
			"filter: subjectEndsWith: too long: 1025 characters, at most 1024 are allowed"},
		{"includedEventTypes count", filter.MaxIncludedEventTypes, func(s *router.SubscriptionSpec, n int) { s.Filter.IncludedEventTypes = list(n, "T.") },
			"includedEventTypes: too many event types: 101 given, at most 100 are allowed"},
		{"event type length", filter.MaxEventTypeLength, func(s *router.SubscriptionSpec, n int) {
			s.Filter.IncludedEventTypes = []string{"A", strings.Repeat("t", n)}
		}, "includedEventTypes[1]: too long: 257 characters, at most 256 are allowed"},
		{"advanced filter key", filter.MaxKeyLength, func(s *router.SubscriptionSpec, n int) {
			s.Filter.AdvancedFilters = []filter.AdvancedFilter{{OperatorType: "IsNotNull", Key: "data." + strings.Repeat("k", n-5)}}
		}, "advancedFilters[0] (IsNotNull on \"data." + strings.Repeat("k", clip.Default-5) + clip.Marker + "\"): too long: the key has 513 characters, at most 512 are allowed"},
		{"labels count", router.MaxLabels, func(s *router.SubscriptionSpec, n int) { s.Labels = list(n, "l") },
			"labels: 101 given, at most 100 are allowed; remove 1"},
		{"label length", router.MaxLabelLength, func(s *router.SubscriptionSpec, n int) { s.Labels = []string{"a", strings.Repeat("ü", n)} },
			"labels[1]: 257 characters, at most 256 are allowed"},
		{"endpointUrl", router.MaxEndpointURLBytes, func(s *router.SubscriptionSpec, n int) {
			base := s.Destination.Properties.EndpointURL + "?code="
			s.Destination.Properties.EndpointURL = base + strings.Repeat("x", n-len(base))
		}, "destination.properties.endpointUrl: 4097 bytes, at most 4096 are allowed"},
		{"header name", router.MaxHeaderNameBytes, func(s *router.SubscriptionSpec, n int) {
			s.Destination.Properties.DeliveryAttributeMappings = []router.DeliveryAttributeMapping{
				{Name: "X-" + strings.Repeat("h", n-2), Type: "Static", Properties: router.DeliveryAttributeMappingProperties{Value: "v"}}}
		}, "deliveryAttributeMappings[0]: the header name has 257 bytes, at most 256 are allowed"},
		{"sourceField", router.MaxSourceFieldLength, func(s *router.SubscriptionSpec, n int) {
			s.Destination.Properties.DeliveryAttributeMappings = []router.DeliveryAttributeMapping{
				{Name: "X-Region", Type: "Dynamic", Properties: router.DeliveryAttributeMappingProperties{SourceField: "data." + strings.Repeat("f", n-5)}}}
		}, "deliveryAttributeMappings[0]: sourceField has 513 characters, at most 512 are allowed"},
	}
}

// TestSubscriptionSizeBounds creates a subscription with each size bound reached (accepted)
// and one unit over it (refused, naming the property, its size and the bound). Only the
// 1 MB request body bounded them: a subject filter of a million characters or a hundred
// thousand labels were stored, listed and (the filter) evaluated on every delivery.
func TestSubscriptionSizeBounds(t *testing.T) {
	ctx := context.Background()
	r, err := router.New(router.Config{SkipEndpointValidation: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range sizeCases() {
		t.Run(tc.name, func(t *testing.T) {
			spec := router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/hook")}
			tc.set(&spec, tc.limit)
			if err := r.CreateSubscription(ctx, "orders", "at-limit", spec); err != nil {
				t.Fatalf("at the bound (%d): %v; want it accepted", tc.limit, err)
			}
			spec = router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/hook")}
			tc.set(&spec, tc.limit+1)
			err := r.CreateSubscription(ctx, "orders", "at-limit", spec) // an update
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("one over the bound: %v; want an error saying %q", err, tc.want)
			}
			if len(err.Error()) > 1000 {
				t.Errorf("the error is %d bytes long; it repeats the oversize text", len(err.Error()))
			}
			if err := r.CreateSubscription(ctx, "orders", "over", spec); err == nil {
				t.Errorf("a new subscription one over the bound was created")
			}
		})
	}
}

// TestSubscriptionSizeBoundAnswers400 checks the admin API's answer to a definition over a
// bound: 400 with Event Grid's error body naming the property.
func TestSubscriptionSizeBoundAnswers400(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "admin", SkipEndpointValidation: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	adminDo(t, srv, "admin", "PUT", "/admin/topics/orders", `{}`)
	labels, _ := json.Marshal(make([]string, 101))
	put := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"http://127.0.0.1:9/hook"}},` +
		`"filter":{"subjectBeginsWith":"` + strings.Repeat("p", 1_000_000) + `"},"labels":` + string(labels) + `}}`
	status, body := adminDo(t, srv, "admin", "PUT", "/admin/topics/orders/eventSubscriptions/big", put)
	raw, _ := json.Marshal(body)
	if status != 400 || !strings.Contains(string(raw), "subjectBeginsWith: too long: 1000000 characters, at most 1024") || !strings.Contains(string(raw), "labels: 101 given, at most 100") {
		t.Errorf("PUT over the bounds: %d %s; want 400 naming subjectBeginsWith and labels", status, raw)
	}
	if len(raw) > 2000 {
		t.Errorf("the answer is %d bytes; it repeats the oversize text", len(raw))
	}
	if _, err := r.Subscription("orders", "big"); err == nil {
		t.Errorf("the refused subscription exists")
	}
}

// TestStoredOversizeSubscriptionStillLoads restarts a router on a store holding definitions
// over every size bound, stored before the bounds existed: each loads and delivers
// (provisioningState Succeeded), as accepted; only new writes are refused.
func TestStoredOversizeSubscriptionStillLoads(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	cfg := router.Config{SkipEndpointValidation: true}
	r, err := router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/hook")}
	for _, tc := range sizeCases() {
		if strings.HasPrefix(tc.name, "header") || tc.name == "sourceField" {
			continue // one spec holds one set of mappings; the sourceField case is below
		}
		tc.set(&spec, tc.limit+1)
	}
	spec.Labels = append(spec.Labels, strings.Fields(strings.Repeat("x ", router.MaxLabels))...)
	spec.Filter.IncludedEventTypes = append(spec.Filter.IncludedEventTypes, strings.Fields(strings.Repeat("T ", filter.MaxIncludedEventTypes))...)
	old := spec
	old.Destination.Properties.DeliveryAttributeMappings = []router.DeliveryAttributeMapping{
		{Name: "X-" + strings.Repeat("h", router.MaxHeaderNameBytes), Type: "Dynamic", Properties: router.DeliveryAttributeMappingProperties{SourceField: "data." + strings.Repeat("f", router.MaxSourceFieldLength)}}}
	def, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutSubscription(ctx, "orders", "old", def); err != nil {
		t.Fatal(err)
	}

	r, err = router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatalf("router.New on a store holding an oversize definition: %v", err)
	}
	defer r.Close(ctx)
	if p, err := r.Provisioning("orders", "old"); err != nil || p.State != router.StateSucceeded {
		t.Fatalf("the stored oversize subscription: %+v %v; want it loaded and Succeeded", p, err)
	}
	got, err := r.Subscription("orders", "old")
	if err != nil || !slices.Equal(got.Labels, old.Labels) || got.Filter.SubjectBeginsWith != old.Filter.SubjectBeginsWith || got.Destination.Properties.EndpointURL != old.Destination.Properties.EndpointURL {
		t.Errorf("the stored subscription reads back as %+v, %v; want it as stored", got, err)
	}
	// Written again unchanged (the YAML config at every start of egrid serve, a template
	// deployed again, a definition read back and PUT), it stays as accepted; any change of it
	// is refused while it is over a bound.
	if err := r.CreateSubscription(ctx, "orders", "old", old); err != nil {
		t.Errorf("PUT of the stored oversize definition unchanged: %v; want it accepted, as it was", err)
	}
	readBack, err := r.Subscription("orders", "old")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "old", readBack.Redacted()); err != nil {
		t.Errorf("PUT of the stored oversize definition as read back (endpoint query string left out): %v; want it accepted", err)
	}
	changed := old
	changed.Filter.SubjectEndsWith = ".json"
	if err := r.CreateSubscription(ctx, "orders", "old", changed); err == nil || !strings.Contains(err.Error(), "labels: 102 given") {
		t.Errorf("PUT of a changed oversize definition: %v; want it refused naming labels", err)
	}
	if got, _ := r.Subscription("orders", "old"); got.Filter.SubjectEndsWith != old.Filter.SubjectEndsWith {
		t.Errorf("the refused change was applied")
	}
	if err := r.CreateSubscription(ctx, "orders", "copy", old); err == nil || !strings.Contains(err.Error(), "labels: 102 given") {
		t.Errorf("a new subscription with the stored oversize definition: %v; want it refused", err)
	}
}

// deadLetterDestination.properties.resourceId is bounded too; the router has no dead-letter
// store, so both definitions are refused, only the longer one for its size.
func TestDeadLetterResourceIDSizeBound(t *testing.T) {
	ctx := context.Background()
	r, err := router.New(router.Config{SkipEndpointValidation: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	const want = "deadLetterDestination.properties.resourceId: 1025 bytes, at most 1024 are allowed"
	for n, refused := range map[int]bool{router.MaxResourceIDBytes: false, router.MaxResourceIDBytes + 1: true} {
		spec := router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/hook"), DeadLetterDestination: &router.DeadLetterDestination{EndpointType: "StorageBlob"}}
		spec.DeadLetterDestination.Properties.BlobContainerName = "dead"
		spec.DeadLetterDestination.Properties.ResourceID = strings.Repeat("r", n)
		err := r.CreateSubscription(ctx, "orders", "dl", spec)
		if got := err != nil && strings.Contains(err.Error(), "resourceId"); got != refused {
			t.Errorf("resourceId of %d bytes: %v; want refused for its size: %v", n, err, refused)
		}
		if refused && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("resourceId of %d bytes: %v; want %q", n, err, want)
		}
	}
}
