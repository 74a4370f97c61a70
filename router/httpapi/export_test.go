package httpapi

import (
	"net/http"
	"time"
)

// SetAfterReceive sets the hook called as a receive's events were taken, before its client is
// checked, and returns a function that removes it.
func SetAfterReceive(f func(req *http.Request)) (reset func()) {
	afterReceive = f
	return func() { afterReceive = nil }
}

// SetReplayHeartbeat sets the interval of a replay answer's heartbeats and returns a function
// that restores it.
func SetReplayHeartbeat(d time.Duration) (reset func()) {
	old := replayHeartbeat
	replayHeartbeat = d
	return func() { replayHeartbeat = old }
}
