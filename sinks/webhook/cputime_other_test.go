//go:build !unix

package webhook_test

import (
	"testing"
	"time"
)

// cpuTime is not measured off unix: the benchmarks report 0 CPU per delivery.
func cpuTime(*testing.B) time.Duration { return 0 }
