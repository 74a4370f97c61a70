package router_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/testkit"
)

// A table block of the dead-letter outbox that fails its checksum loses the dead letters in it,
// reported once by the store, and the router starts. Before, reading the outbox failed at the
// block with pebble's bare error, nothing counted, and so did router.New, at every start.
func TestRouterStartsPastADamagedOutboxBlock(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var recs []store.DeadLetterRecord
	for i := range 200 {
		recs = append(recs, store.DeadLetterRecord{ID: fmt.Sprintf("%020d", i+1), Payload: fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("p", 300))})
	}
	if err := st.PutDeadLetters(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil { // flushes the outbox to a table file
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	damageTable(t, db, dir, "the outbox", func(smallest, largest []byte) bool {
		return smallest[0] <= 'D' && largest[0] >= 'D'
	})

	var logs bytes.Buffer
	var mu sync.Mutex
	counts := map[string]int{}
	st, err = disk.Open(dir, disk.Options{
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelError})),
		OnCorruption: func(kind string) {
			mu.Lock()
			counts[kind]++
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: st, DeadLetterStore: testkit.NewObjectStore()})
	if err != nil {
		t.Fatalf("router.New: %v; want the router started without the damaged block's dead letters", err)
	}
	defer r.Close(ctx)
	mu.Lock()
	defer mu.Unlock()
	if counts[disk.DamageTable] != 1 || len(counts) != 1 || strings.Count(logs.String(), `level=ERROR msg="disk store: dead letters of the outbox are in a damaged table block`) != 1 {
		t.Errorf("damage counted %v; want one table damage and one ERROR of the store about the outbox; logs:\n%s", counts, logs.String())
	}
	if h := st.Health(); h.Corruptions != 1 {
		t.Errorf("Health().Corruptions = %d; want 1", h.Corruptions)
	}
}
