package actors_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	_ "github.com/egridio/egrid/actors" // its registry setting
)

type nopProcess struct{}

func (nopProcess) SendUserMessage(*actor.PID, any)   {}
func (nopProcess) SendSystemMessage(*actor.PID, any) {}
func (nopProcess) Stop(*actor.PID)                   {}

// An actor system's registry entry costs its PID and a slot of a shared map, not a map of
// its own: with concurrent-map's default 32 shards in each of protoactor's 1 024 maps, the
// first 10 000 entries each made a map of their own (~230 B held an entry, where it now holds ~35 B).
func TestRegistryEntriesAreSmall(t *testing.T) {
	system := actor.NewActorSystem()
	const n = 10_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("topic/subscription-%05d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, id := range ids {
		if _, ok := system.ProcessRegistry.Add(nopProcess{}, id); !ok {
			t.Fatalf("Add(%q): already registered", id)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(system)
	per := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
	t.Logf("%.0f B held per registry entry", per)
	if per > 100 {
		t.Errorf("a registry entry holds %.0f B, want at most 100 (its PID and a share of a map's slots)", per)
	}
}
