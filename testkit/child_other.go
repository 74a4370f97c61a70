//go:build !linux

package testkit

import "os/exec"

// setParentDeathSignal does nothing here: only Linux has a parent-death signal, so on other
// systems a server started by [startChild] outlives a test binary that exits without running
// its cleanups (a `go test -timeout`, an escaped panic, a kill).
func setParentDeathSignal(*exec.Cmd) {}
