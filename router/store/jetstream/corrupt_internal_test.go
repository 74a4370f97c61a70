package jetstream

import (
	"errors"
	"fmt"
	"testing"

	"github.com/egridio/egrid/router/store"
)

// A stored value that does not decode (a delivery history, a definition) fails with an error
// that matches store.ErrCorrupt, so the router answers it as damage (egrid explain: the
// history is damaged) rather than as a store to retry; its message is the store's own.
func TestUndecodableValuesAreStoreCorrupt(t *testing.T) {
	_, _, err := decodeHistory([]byte{0xee, 1, 2})
	if err == nil || !errors.Is(err, store.ErrCorrupt) || err.Error() != "corrupt value: delivery history of an unknown format" {
		t.Errorf("decodeHistory of an unknown format = %v; want errCorrupt matching store.ErrCorrupt, its message unchanged", err)
	}
	def := topicDamaged("orders", 7, fmt.Errorf("%w: bad spec", errCorrupt))
	if !errors.Is(def, store.ErrCorrupt) || !errors.Is(def, store.ErrDamaged) || !errors.Is(def, errCorrupt) {
		t.Errorf("damaged definition error %v; want it to match store.ErrCorrupt, store.ErrDamaged and errCorrupt", def)
	}
}
