package disk

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
)

// The recovery loop can run between a generation's failure being recorded (and the loop woken)
// and the generation's failed channel being closed: it must take the generation for failed
// and reopen the store. It took it for healthy and went back to sleep, so a full disk under
// load left the store refusing publishes for good (TestDiskFull failed so in a loaded CI run).
func TestRecoveryWokenBeforeTheFailureIsClosed(t *testing.T) {
	opts := Options{fs: vfs.NewMem(), freeBytes: func(string) (uint64, error) { return 1 << 40, nil }}
	s, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	old := s.gen
	var done bool
	old.fail(errors.New("injected write failure"), func(err error) {
		old.fs.fence()
		s.health.setFailed(err)
		// Here onFail wakes the recovery loop; run its attempt now, before fail closes
		// old.failed.
		done, _ = s.tryRecover()
	})
	s.mu.RLock()
	reopened := s.gen != old
	s.mu.RUnlock()
	if !done || !reopened {
		t.Fatalf("a recovery attempt woken by the failure: done %v, reopened %v; want the store reopened", done, reopened)
	}
	if h := s.Health(); h.State != store.Healthy {
		t.Errorf("health after the reopening = %+v, want healthy", h)
	}
}
