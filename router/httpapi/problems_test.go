package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
)

// A publish of many bad events is answered with the first 20 problems as details and a
// message counting them all, and the events that have them, so the client knows how many of
// its events are bad; the admin API counts a definition's problems the same way.
func TestPublishCountsEveryProblem(t *testing.T) {
	s := newServer(t, router.Config{})
	key := http.Header{"Aeg-Sas-Key": {s.key1}}
	event := `{"id":"1","subject":"s","eventType":"t","eventTime":"x","data":{}}`
	for _, c := range []struct {
		events int
		want   string
	}{
		{5000, "5000 problems in the request, in 5000 events; the first 20 are listed as details; nothing was accepted: event 0: "},
		{21, "21 problems in the request, in 21 events; the first 20 are listed as details; nothing was accepted: event 0: "},
		{20, "20 problems in the request, in 20 events; nothing was accepted: event 0: "},
	} {
		body := "[" + strings.Repeat(event+",", c.events-1) + event + "]"
		status, resp := s.post("/topics/orders/api/events", "application/json", []byte(body), key)
		var e struct {
			Error struct {
				Message string
				Details []struct{ Message string }
			}
		}
		if err := json.Unmarshal([]byte(resp), &e); err != nil {
			t.Fatalf("%d events: status %d body %q: %v", c.events, status, resp, err)
		}
		if status != 400 || len(e.Error.Details) != 20 || !strings.HasPrefix(e.Error.Message, c.want) {
			t.Errorf("%d bad events: %d, message %q with %d details; want 400, a message starting %q and 20 details", c.events, status, e.Error.Message, len(e.Error.Details), c.want)
		}
	}
}
