package httpapi

import "net/http"

// SetAfterReceive sets the hook called as a receive's events were taken, before its client is
// checked, and returns a function that removes it.
func SetAfterReceive(f func(req *http.Request)) (reset func()) {
	afterReceive = f
	return func() { afterReceive = nil }
}
