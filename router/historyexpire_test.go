package router_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// slowExpiry is a store whose ExpireHistory takes until its context ends or release is
// closed: a cluster store working through many expired histories.
type slowExpiry struct {
	store.Store
	entered chan struct{}
	ended   chan error // the context's error when the expiry returned
	release chan struct{}
}

func (s *slowExpiry) ExpireHistory(ctx context.Context, now time.Time) error {
	s.entered <- struct{}{}
	select {
	case <-ctx.Done():
		s.ended <- ctx.Err()
		return ctx.Err()
	case <-s.release:
		s.ended <- nil
		return nil
	}
}

// Close cuts an hourly expiry of delivery histories that is still running: it ran on a
// context of its own that nothing ended, so Close waited for it past its grace.
func TestCloseCutsAnExpiryOfHistories(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowExpiry{Store: store.NewMemory(), entered: make(chan struct{}, 1), ended: make(chan error, 1), release: make(chan struct{})}
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: st})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Advance(time.Hour + time.Second)
		<-st.entered
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("Close while histories expire = %v, want nil", err)
		}
		select {
		case err := <-st.ended:
			if err == nil {
				t.Errorf("the expiry ended as if done, want its context ended by Close")
			}
		default:
			t.Errorf("the expiry was still running after Close returned")
			close(st.release)
			<-st.ended
		}
	})
}
