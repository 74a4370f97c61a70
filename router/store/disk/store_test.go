package disk_test

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/router/store/storetest"
	"github.com/egridio/egrid/schemas"
)

func open(t *testing.T, dir string) store.Store {
	t.Helper()
	s, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, t.TempDir()) })
}

func TestReopen(t *testing.T) {
	storetest.RunReopen(t, open)
}

// Appends go on with the right numbers after a reopen, for several topics written
// concurrently before and after.
func TestReopenKeepsAppending(t *testing.T) {
	dir := t.TempDir()
	topics := []string{"a", "b", "c"}
	want := map[string][]store.Entry{}
	appendAll := func(s store.Store, round int) {
		t.Helper()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, name := range topics {
			for w := range 4 {
				wg.Go(func() {
					evs := []*schemas.Event{testEvent(fmt.Sprintf("%s-r%d-w%d", name, round, w))}
					last, err := s.Append(t.Context(), name, publishTime, evs)
					if err != nil {
						t.Errorf("Append(%s): %v", name, err)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					want[name] = append(want[name], store.Entry{Seq: last, PublishTime: publishTime, Event: evs[0]})
				})
			}
		}
		wg.Wait()
	}
	check := func(s store.Store) {
		t.Helper()
		for _, name := range topics {
			w := slices.SortedFunc(slices.Values(want[name]), func(a, b store.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
			got, err := s.Read(t.Context(), name, 0, 1000)
			if err != nil {
				t.Fatalf("Read(%s): %v", name, err)
			}
			if len(got) != len(w) {
				t.Fatalf("Read(%s) returned %d entries, want %d", name, len(got), len(w))
			}
			for i := range w {
				if got[i].Seq != uint64(i+1) || w[i].Seq != uint64(i+1) || !reflect.DeepEqual(got[i].Event, w[i].Event) ||
					!got[i].PublishTime.Equal(publishTime) {
					t.Errorf("%s entry %d: got seq %d %+v, want seq %d %+v", name, i, got[i].Seq, got[i].Event, i+1, w[i].Event)
				}
			}
		}
	}

	s := open(t, dir)
	t.Cleanup(func() { _ = s.Close() }) // the latest s; Close is idempotent
	for _, name := range topics {
		if err := s.PutTopic(t.Context(), name, nil); err != nil {
			t.Fatalf("PutTopic: %v", err)
		}
	}
	for round := range 3 {
		if round > 0 {
			s = open(t, dir)
		}
		appendAll(s, round)
		check(s)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}
