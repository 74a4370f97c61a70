package httpapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
)

// An error answer says what is wrong in a few kilobytes, whatever the request: names and
// values it echoes (member names, attribute names, paths, topic names) are shortened. Before,
// a publish of one event with a 1 MB member name was answered with that name twice (in the
// message and in the detail), each '<' escaped into six bytes: a 12 MB answer to a 1 MB
// request, which a client that does not read it kept in the server's memory.
func TestErrorAnswersStaySmall(t *testing.T) {
	s := newServer(t, router.Config{})
	key := http.Header{"Aeg-Sas-Key": {s.key1}}
	const classic = "/topics/orders/api/events?api-version=2018-01-01"
	const limit = 1 << 20
	huge := strings.Repeat("<", limit-200)
	var twenty []string
	for i := range 20 {
		twenty = append(twenty, `{"id":"`+string(rune('a'+i))+`","subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":1,"`+strings.Repeat("<", limit/21-200)+`":1}`)
	}
	// lt returns the escaped path that decodes to "/"+prefix, '<'s and suffix, MaxPathBytes
	// long (over with over).
	lt := func(prefix, suffix string, over bool) string {
		n := httpapi.MaxPathBytes - 1 - len(prefix) - len(suffix)
		if over {
			n++
		}
		return "/" + prefix + strings.Repeat("%3C", n) + suffix
	}
	for _, c := range []struct {
		name, path, ctype, body string
		status                  int
	}{
		{"an Event Grid member name of 1 MB", classic, "application/json", `[{"id":"1","subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":1,"` + huge + `":1}]`, 400},
		{"twenty events with long member names", classic, "application/json", "[" + strings.Join(twenty, ",") + "]", 400},
		{"a CloudEvents extension name of 1 MB", "/topics/ns-orders:publish?api-version=2023-11-01", "application/cloudevents+json", `{"specversion":"1.0","id":"1","source":"/s","type":"t","` + huge + `":1}`, 400},
		{"a path over the limit", lt("", "", true), "application/json", "[]", 414},
		{"an unknown route with a long path", lt("", "", false), "application/json", "[]", 404},
		{"an unknown topic with a long name", lt("topics/", "/api/events", false), "application/json", "[]", 401},
		{"an unknown subscription with a long name", lt("topics/ns-orders/eventsubscriptions/", ":receive", false), "application/json", "", 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := url.Parse(c.path); err != nil {
				t.Fatal(err)
			}
			status, body := s.post(c.path, c.ctype, []byte(c.body), key)
			if status != c.status {
				t.Fatalf("status %d, want %d: %.300s", status, c.status, body)
			}
			if len(body) > 32<<10 {
				t.Errorf("a %d-byte answer to a %d-byte request: %.300s", len(body), len(c.body)+len(c.path), body)
			}
		})
	}
}
