package router

import (
	"strings"
	"sync"

	"github.com/egridio/egrid/router/retry"
)

// builtinProfiles shares one copy of each built-in retry profile among all subscriptions:
// profiles are read-only once built (retry.Policy's contract), and a fresh copy per
// subscription would cost most of an idle subscription's memory.
var builtinProfiles sync.Map // lower-case name -> *retry.Profile

// builtinProfile returns the shared built-in profile named name (case-insensitive).
func builtinProfile(name string) (*retry.Profile, error) {
	key := strings.ToLower(name)
	if p, ok := builtinProfiles.Load(key); ok {
		return p.(*retry.Profile), nil
	}
	p, err := retry.ProfileByName(name)
	if err != nil {
		return nil, err
	}
	actual, _ := builtinProfiles.LoadOrStore(key, p)
	return actual.(*retry.Profile), nil
}
