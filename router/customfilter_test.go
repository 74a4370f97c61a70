package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// TestStoredCustomSchemaFiltersLoadAndMatch checks advanced filters of subscriptions stored on
// a topic with a custom input schema, loaded at restart: one copied from Azure, whose keys are
// data paths into the published object and the mapped envelope (eventgrid-behaviour.md §4.4),
// and one written for egrid's top-level keys, stored before data paths read the object's root.
// Both load as Succeeded and both get the event. The Azure one got nothing while keys read
// only the published object.
func TestStoredCustomSchemaFiltersLoadAndMatch(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	got := map[string]chan string{"azure": make(chan string, 1), "top-level": make(chan string, 1)}
	deps := router.Deps{Store: st, Sinks: map[string]sinks.Sink{}}
	for name, ch := range got {
		deps.Sinks[name] = sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			for _, e := range b.Events {
				select {
				case ch <- e.ID:
				default:
				}
			}
			return nil
		})
	}
	r, err := router.New(router.Config{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	topic := router.TopicSpec{InputSchema: "CustomEventSchema", InputSchemaMapping: &router.InputSchemaMapping{
		InputSchemaMappingType: "Json", Properties: &schemas.InputMapping{
			ID:        schemas.FieldMapping{SourceField: "ref"},
			Subject:   schemas.FieldMapping{SourceField: "resource"},
			EventType: schemas.FieldMapping{DefaultValue: "Created"},
		},
	}}
	if _, err := r.CreateTopic(ctx, "users", topic); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{
		"azure": `{"destination":{"endpointType":"Sink","properties":{"sinkName":"azure"}},"filter":{"subjectBeginsWith":"/users/","advancedFilters":[
			{"operatorType":"StringIn","key":"data.siteName","values":["north"]},
			{"operatorType":"StringBeginsWith","key":"subject","values":["/users/"]},
			{"operatorType":"StringIn","key":"eventType","values":["Created"]},
			{"operatorType":"IsNotNull","key":"data"}]}}`,
		"top-level": `{"destination":{"endpointType":"Sink","properties":{"sinkName":"top-level"}},"filter":{"advancedFilters":[
			{"operatorType":"StringIn","key":"siteName","values":["north"]},
			{"operatorType":"NumberGreaterThan","key":"reading.temp","value":20},
			{"operatorType":"IsNullOrUndefined","key":"resource.x"}]}}`,
	}
	for name, def := range stored {
		if err := st.PutSubscription(ctx, "users", name, []byte(def)); err != nil {
			t.Fatal(err)
		}
	}

	r, err = router.New(router.Config{}, deps)
	if err != nil {
		t.Fatalf("router.New on a store holding custom-schema filters: %v; want it to start", err)
	}
	defer r.Close(ctx)
	for name := range stored {
		if p, err := r.Provisioning("users", name); err != nil || p.State != router.StateSucceeded {
			t.Errorf("%s after restart: %+v %v, want Succeeded", name, p, err)
		}
	}
	if err := r.Publish(ctx, "users", map[string]any{"ref": "e1", "resource": "/users/1", "siteName": "north", "reading": map[string]any{"temp": 21.5}}); err != nil {
		t.Fatal(err)
	}
	for name, ch := range got {
		select {
		case id := <-ch:
			if id != "e1" {
				t.Errorf("%s got event %q, want e1", name, id)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s: no delivery within 30 s; its filter should match the event", name)
		}
	}
}
