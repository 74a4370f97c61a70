package store_test

import (
	"testing"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/storetest"
)

func TestMemory(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return store.NewMemory() })
}
