package router_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
)

// Explain of an event whose delivery history is in a damaged table block of a disk store says
// the history is damaged (ErrHistoryDamaged: the admin API's 500 naming egrid store check), not
// that the store is unavailable: retrying could never help. The histories outside the block
// are explained as before. Before, each explain in the block was ErrUnavailable, answered 503
// "retry later".
func TestExplainOfAHistoryInADamagedDiskBlockSaysDamaged(t *testing.T) {
	const n = 200
	ctx := context.Background()
	dir := t.TempDir()
	cfg := router.Config{InsecureDev: true, SkipEndpointValidation: true}
	st, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "hook", router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:1/hook")}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var recs []store.HistoryRecord
	for i := range n {
		id := fmt.Sprintf("e%03d", i)
		recs = append(recs, store.HistoryRecord{EventID: id, Expires: time.Now().Add(time.Hour),
			Payload: fmt.Appendf(nil, `{"eventId":%q,"state":"Delivered","attempts":[],"pad":%q}`, id, strings.Repeat("p", 300))})
	}
	if err := st.PutHistory(ctx, "orders", "hook", 0, recs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil { // flushes the histories to a table file
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	damageTable(t, db, dir, "the delivery histories", func(smallest, largest []byte) bool {
		return smallest[0] <= 'H' && largest[0] >= 'H'
	})

	st, err = disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err = router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	damaged := 0
	for i := range n {
		id := fmt.Sprintf("e%03d", i)
		e, err := r.Explain(ctx, "orders", "hook", id)
		switch {
		case errors.Is(err, router.ErrHistoryDamaged) && !errors.Is(err, router.ErrUnavailable):
			damaged++
		case err != nil:
			t.Fatalf("Explain(%s) = %v; want the history, or ErrHistoryDamaged for one in the damaged block", id, err)
		case e.State != router.EventDelivered:
			t.Fatalf("Explain(%s) state %q; want Delivered", id, e.State)
		}
	}
	if damaged == 0 || damaged == n {
		t.Errorf("%d of %d histories explained as damaged; want those of the damaged block, and the others explained", damaged, n)
	}
}
