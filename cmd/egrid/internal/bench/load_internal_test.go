package bench

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Every request the load generator numbers gets ids of its own for all its events, and the
// bodies stay what eventBody and cloudEventBody made otherwise.
func TestRequestBodiesNumberEveryRequest(t *testing.T) {
	for name, body := range map[string][]byte{
		"Event Grid":  eventBody(3, "e", "/bench"),
		"CloudEvents": cloudEventBody(2, "p"),
	} {
		t.Run(name, func(t *testing.T) {
			rb := newRequestBodies(body)
			seen := make(map[string]bool)
			buf := bytes.Clone(body)
			for range 3 {
				rb.fill(buf)
				var evs []struct {
					ID string `json:"id"`
				}
				if err := json.Unmarshal(buf, &evs); err != nil {
					t.Fatalf("a filled body is not JSON: %v", err)
				}
				for _, ev := range evs {
					if seen[ev.ID] {
						t.Fatalf("id %q seen twice", ev.ID)
					}
					seen[ev.ID] = true
				}
				if len(buf) != len(body) || bytes.Count(buf, []byte(`"id":"`)) != len(evs) {
					t.Fatalf("the filled body changed shape:\n%s", buf)
				}
			}
			if want := 3 * bytes.Count(body, []byte(`"id":"`)); len(seen) != want {
				t.Fatalf("%d distinct ids over 3 requests, want %d", len(seen), want)
			}
		})
	}
	plain := []byte(`[{"id":"fixed","data":{}}]`)
	buf := bytes.Clone(plain)
	newRequestBodies(plain).fill(buf)
	if !bytes.Equal(buf, plain) {
		t.Fatalf("a body without request digits changed: %s", buf)
	}
}
