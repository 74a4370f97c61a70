package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Join's reads of a bucket just created with replicas time out until the bucket has a leader,
// or find no stream on a lagging server: untilLeader tries them again, and gives up on other
// errors at once and after leaderWait.
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

		// The API error a lagging server answers for a bucket just created on three servers.
		tries = 0
		lag := &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}
		err = untilLeader(t.Context(), func(context.Context) error {
			tries++
			if tries < 3 {
				return fmt.Errorf("reading bucket CL_leases: %w", lag)
			}
			return nil
		})
		if err != nil || tries != 3 {
			t.Errorf("untilLeader = %v after %d tries; want nil after 3 (2 answers of stream not found)", err, tries)
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
