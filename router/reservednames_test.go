package router_test

import (
	"context"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// TestReservedTopicNamesAreRefusedOnCreate: as in Event Grid, a new topic's name may not
// begin with Microsoft-, EventGrid- or System- (in any case); names that only resemble them
// are taken (EventGridTopic, systemx: the troubleshooting guide's 2019 text listed the words
// without their hyphen; since 2020 it lists Microsoft-, EventGrid-, System-). A topic an earlier egrid stored under such a name still loads, updates its keys
// and deletes.
func TestReservedTopicNamesAreRefusedOnCreate(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	if err := st.PutTopic(ctx, "Microsoft-old", []byte(`{"key1":"b2xkLWtleS1vbmUtb2YtYS1zdG9yZWQtdG9waWM=","key2":"b2xkLWtleS10d28tb2YtYS1zdG9yZWQtdG9waWM="}`)); err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Config{}, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	for _, name := range []string{"Microsoft-x", "EventGrid-abc", "System-abc", "microsoft-y", "SYSTEM-z", "eventgrid-"} {
		_, err := r.CreateTopic(ctx, name, router.TopicSpec{})
		if err == nil || !strings.Contains(err.Error(), "is reserved: names beginning with Microsoft-, EventGrid- or System-") {
			t.Errorf("CreateTopic(%q): %v, want an error saying the name is reserved", name, err)
		}
		if _, err := r.Topic(name); err == nil {
			t.Errorf("the refused topic %q exists", name)
		}
	}
	for _, name := range []string{"Microsoftx", "Systems-a", "my-System-topic", "EventGrids", "EventGridTopic", "systemx"} {
		if _, err := r.CreateTopic(ctx, name, router.TopicSpec{}); err != nil {
			t.Errorf("CreateTopic(%q): %v, want it taken (no reserved word and its hyphen at the start)", name, err)
		}
	}

	spec, err := r.Topic("microsoft-OLD")
	if err != nil || spec.Key1 != "b2xkLWtleS1vbmUtb2YtYS1zdG9yZWQtdG9waWM=" {
		t.Fatalf("the stored topic Microsoft-old: %+v %v, want it loaded", spec, err)
	}
	const rotated = "cm90YXRlZC1rZXktb2YtYS1zdG9yZWQtdG9waWMtb2s="
	if _, err := r.CreateTopic(ctx, "Microsoft-old", router.TopicSpec{Key1: rotated}); err != nil {
		t.Errorf("rotating a key of the stored topic Microsoft-old: %v", err)
	}
	if spec, _ := r.Topic("Microsoft-old"); spec.Key1 != rotated {
		t.Errorf("key1 after the update: %q, want %q", spec.Key1, rotated)
	}
	if err := r.DeleteTopic(ctx, "Microsoft-old"); err != nil {
		t.Fatalf("deleting the stored topic Microsoft-old: %v", err)
	}
	if defs, err := st.Topics(ctx); err != nil || len(defs) != 6 {
		t.Errorf("stored topics after the delete: %d %v, want the 6 taken ones", len(defs), err)
	}
	if _, err := r.CreateTopic(ctx, "Microsoft-old", router.TopicSpec{}); err == nil {
		t.Errorf("creating Microsoft-old again after its delete was taken, want it refused")
	}
}

// TestDeadLetterSystemTopicMayTakeAReservedName: the dead-letter notification topic is
// egrid's own, and "System-" is what it is: deadLetters.systemTopic: System-deadletters, which
// a configuration could name before names were checked, is created at start, where the
// reserved-name check made router.New fail on a new store.
func TestDeadLetterSystemTopicMayTakeAReservedName(t *testing.T) {
	ctx := context.Background()
	cfg := router.Config{InsecureDev: true, DeadLetters: router.DeadLetterConfig{SystemTopic: "System-deadletters"}}
	r, err := router.New(cfg, router.Deps{DeadLetterStore: testkit.NewObjectStore()})
	if err != nil {
		t.Fatalf("router.New with deadLetters.systemTopic System-deadletters: %v", err)
	}
	defer r.Close(ctx)
	if _, err := r.Topic("System-deadletters"); err != nil {
		t.Errorf("the dead-letter notification topic: %v, want it created", err)
	}
	if _, err := r.CreateTopic(ctx, "System-other", router.TopicSpec{}); err == nil {
		t.Errorf("CreateTopic(System-other) was taken beside the system topic; want it refused")
	}
}
