package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
)

// Join's reads of a bucket just created with replicas time out until the bucket has a leader:
// untilLeader tries them again, and gives up on other errors at once and after leaderWait.
func TestUntilLeaderRetriesTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tries := 0
		err := untilLeader(t.Context(), func(ctx context.Context) error {
			tries++
			if tries < 4 {
				<-ctx.Done() // no leader: the request waits out its try
				return fmt.Errorf("reading the slot of node n1: %w", ctx.Err())
			}
			return nil
		})
		if err != nil || tries != 4 {
			t.Errorf("untilLeader = %v after %d tries; want nil after 4 (3 timeouts)", err, tries)
		}

		tries = 0
		other := errors.New("bucket refused")
		err = untilLeader(t.Context(), func(context.Context) error { tries++; return other })
		if !errors.Is(err, other) || tries != 1 {
			t.Errorf("untilLeader = %v after %d tries; want the error at once", err, tries)
		}

		tries = 0
		start := time.Now()
		err = untilLeader(t.Context(), func(context.Context) error { tries++; return nats.ErrTimeout })
		if !errors.Is(err, nats.ErrTimeout) || time.Since(start) > leaderWait || tries < 2 {
			t.Errorf("untilLeader = %v after %d tries and %v; want the timeout within %v", err, tries, time.Since(start), leaderWait)
		}
	})
}
