//go:build !unix

package disk_test

import "time"

// cpuTime is not measured off unix: the benchmarks report 0 CPU per event.
func cpuTime() time.Duration { return 0 }
