package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/egridio/egrid/router/store"
)

// orphanRounds bounds testCreateRacingTopicDelete's races.
const orphanRounds = 40

// A subscription created (CreateSubscription, or PutSubscription of a new name) while its
// topic is deleted and created again is either refused (store.ErrNotFound: its topic was
// gone) or a subscription of the topic that stands after: its cursor within that topic's
// journal, which numbers from 1 again. It is never a subscription of the deleted topic left
// behind, with a cursor past the new journal's end, nor one the create was refused for.
func testCreateRacingTopicDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i := range orphanRounds {
		topic := fmt.Sprintf("t%d", i)
		putTopic(t, s, topic)
		appendOK(t, s, topic, t0, events(topic, 0, 2))
		start := make(chan struct{})
		var wg sync.WaitGroup
		var delErr, createErr error
		wg.Go(func() {
			<-start
			if delErr = s.DeleteTopic(ctx, topic); delErr == nil {
				delErr = s.CreateTopic(ctx, topic, []byte("again"))
			}
		})
		wg.Go(func() {
			<-start
			if i%2 == 0 {
				createErr = s.CreateSubscription(ctx, topic, "sub", []byte("s"))
			} else {
				createErr = s.PutSubscription(ctx, topic, "sub", []byte("s"))
			}
		})
		close(start)
		wg.Wait()
		if delErr != nil {
			t.Fatalf("round %d: DeleteTopic and CreateTopic again: %v", i, delErr)
		}
		if createErr != nil && !errors.Is(createErr, store.ErrNotFound) {
			t.Fatalf("round %d: the subscription's create: %v, want nil or an error matching store.ErrNotFound", i, createErr)
		}
		defs, err := s.Subscriptions(ctx, topic)
		if err != nil {
			t.Fatalf("round %d: Subscriptions: %v", i, err)
		}
		if len(defs) == 0 {
			continue
		}
		st := load(t, s, topic, "sub")
		if last := lastSeq(t, s, topic); st.Cursor > last || createErr != nil {
			t.Errorf("round %d: the topic created again holds subscription %q at cursor %d, its journal ending at %d, its create answered %v; "+
				"want a subscription of the new topic (cursor within its journal) or none", i, defs[0].Name, st.Cursor, last, createErr)
		}
	}
}
