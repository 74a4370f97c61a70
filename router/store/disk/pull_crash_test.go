package disk_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store/disk"
)

// A crash of a router serving a queue subscription (pebble's crashable file system keeping
// only what was synced: kill -9 with the page cache lost) keeps every answer the consumer had:
// an acknowledged event is never received again, a received one comes back with its delivery
// count, a released one keeps its delay (eventgrid-behaviour.md §9).
func TestQueueSubscriptionSurvivesCrash(t *testing.T) {
	ctx := t.Context()
	fs := vfs.NewCrashableMem()
	st, err := disk.OpenFS("db", disk.Options{}, fs)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	r, err := router.New(router.Config{}, router.Deps{Store: st})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	t.Cleanup(func() {
		_ = r.Close(ctx)
		_ = st.Close()
	})
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{Kind: router.KindNamespace}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	spec := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}}
	if err := r.CreateSubscription(ctx, "orders", "workers", spec); err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	ce := func(id string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/orders","type":"Order.Created","data":{}}`, id))
	}
	if err := r.Publish(ctx, "orders", ce("acked"), ce("held"), ce("released")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	evs, err := r.Receive(ctx, "orders", "workers", router.ReceiveOptions{MaxEvents: 3, MaxWait: router.MinReceiveWait})
	if err != nil || len(evs) != 3 {
		t.Fatalf("Receive = %d events, %v; want 3", len(evs), err)
	}
	if res, err := r.Acknowledge(ctx, "orders", "workers", []string{evs[0].LockToken}); err != nil || len(res.Succeeded) != 1 {
		t.Fatalf("Acknowledge = %+v, %v", res, err)
	}
	released := time.Now()
	if res, err := r.Release(ctx, "orders", "workers", []string{evs[2].LockToken}, time.Hour); err != nil || len(res.Succeeded) != 1 {
		t.Fatalf("Release = %+v, %v", res, err)
	}

	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	st2, err := disk.OpenFS("db", disk.Options{}, crashed)
	if err != nil {
		t.Fatalf("Open after the crash: %v", err)
	}
	state, err := st2.LoadSubscription(ctx, "orders", "workers")
	if err != nil {
		t.Fatalf("LoadSubscription: %v", err)
	}
	if state.Cursor != 3 || len(state.Parked) != 2 {
		t.Fatalf("after the crash: cursor %d, %d parked; want cursor 3 and held, released parked", state.Cursor, len(state.Parked))
	}
	for _, p := range state.Parked {
		if p.Attempts != 1 {
			t.Errorf("parked %s keeps delivery count %d, want 1", p.Event.ID, p.Attempts)
		}
		if p.Event.ID == "released" && p.NextDue.Before(released.Add(time.Hour)) {
			t.Errorf("released event due %v after its release, want its hour", p.NextDue.Sub(released))
		}
	}
	r2, err := router.New(router.Config{}, router.Deps{Store: st2})
	if err != nil {
		t.Fatalf("router.New after the crash: %v", err)
	}
	t.Cleanup(func() {
		_ = r2.Close(ctx)
		_ = st2.Close()
	})
	// The held event is available at once (its lock died with the process); the released one
	// waits for its hour, the acknowledged one is gone: one receive gets exactly the held one.
	got, err := r2.Receive(ctx, "orders", "workers", router.ReceiveOptions{MaxEvents: 10, MaxWait: router.MinReceiveWait})
	if err != nil {
		t.Fatalf("Receive after the crash: %v", err)
	}
	var ids []string
	for _, e := range got {
		var ev struct{ ID string }
		_ = json.Unmarshal(e.Event, &ev)
		ids = append(ids, fmt.Sprintf("%s#%d", ev.ID, e.DeliveryCount))
	}
	if !slices.Equal(ids, []string{"held#2"}) {
		t.Fatalf("received after the crash %v, want [held#2]", ids)
	}
}
