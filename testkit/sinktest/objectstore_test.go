package sinktest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
	"github.com/egridio/egrid/testkit/sinktest"
)

func buckets() func(t *testing.T) string {
	var n atomic.Int64
	return func(*testing.T) string { return fmt.Sprintf("bucket-%d", n.Add(1)) }
}

func TestMemoryObjectStore(t *testing.T) {
	sinktest.ObjectStore(t, func(*testing.T) sinks.ObjectStore { return testkit.NewObjectStore() }, buckets())
}

// The fault-injecting wrapper passes while up: it is a faithful store until told to fail.
func TestFaultyObjectStoreWhileUp(t *testing.T) {
	sinktest.ObjectStore(t, func(*testing.T) sinks.ObjectStore {
		return testkit.NewFaultyObjectStore(testkit.NewObjectStore())
	}, buckets())
}

func TestFaultyObjectStoreWhileDown(t *testing.T) {
	ctx := context.Background()
	mem := testkit.NewObjectStore()
	f := testkit.NewFaultyObjectStore(mem)
	f.Down()
	if _, err := f.Put(ctx, "b", "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"}); !errors.Is(err, testkit.ErrStoreDown) {
		t.Errorf("Put while down: %v, want ErrStoreDown", err)
	}
	if _, err := f.List(ctx, "b", sinks.ListQuery{}); !errors.Is(err, testkit.ErrStoreDown) {
		t.Errorf("List while down: %v, want ErrStoreDown", err)
	}
	if _, _, err := f.Get(ctx, "b", "k", 0); !errors.Is(err, testkit.ErrStoreDown) {
		t.Errorf("Get while down: %v, want ErrStoreDown", err)
	}
	if mem.Puts() != 0 || f.Failures() != 3 {
		t.Errorf("while down: %d puts reached the store and %d calls failed; want 0 and 3", mem.Puts(), f.Failures())
	}
	f.Up()
	if _, err := f.Put(ctx, "b", "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"}); err != nil || mem.Puts() != 1 {
		t.Errorf("Put after Up: %v (%d puts), want it stored", err, mem.Puts())
	}
}
