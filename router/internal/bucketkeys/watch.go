package bucketkeys

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WatchIdle is how long InitialValues waits for a watch's next initial value before it takes
// the watch for stalled. A watch delivers its initial values back to back; a pause this long
// ends only the wait, not the listing, which reads the keys the watch did not deliver with
// gets.
const WatchIdle = 500 * time.Millisecond

// InitialValues calls fn with each initial value of the key watch w, up to its end marker, or
// until no value came for WatchIdle: the caller then reads each key Stored lists that fn was
// not given with a get. When ctx ends sooner than three times WatchIdle from now, the wait is
// a third of the time left instead, leaving the gets the rest. An error of fn ends it,
// returned as it is; so does ctx's end.
//
// The end marker can never come. nats.go's watcher sends it on the message that says nothing
// more is pending, or once it received more messages than the first one said were pending; a
// key counted as pending when the watch's consumer was made and removed from the stream
// before it was delivered (purged with its subject, or expired: the bucket's TTL) is never
// delivered, so the message saying nothing more is pending never comes, and the watcher waits
// for the next write of a key the watch matches, which may never come either.
func InitialValues(ctx context.Context, w jetstream.KeyWatcher, fn func(jetstream.KeyValueEntry) error) error {
	wait := WatchIdle
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)/3)
	}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return errors.New("listing keys: the watch ended early")
			case e == nil:
				return nil
			}
			if err := fn(e); err != nil {
				return err
			}
			idle.Reset(wait)
		case <-idle.C:
			return nil // stalled: the caller reads the keys left out with gets
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
