//go:build !unix

package bench

import "time"

// cpuTime returns 0 where the process's CPU time is not read (the restart row then has no CPU
// figure); the bench measures on Linux.
func cpuTime() time.Duration { return 0 }

// syncDisks does nothing where there is no sync(2).
func syncDisks() {}
