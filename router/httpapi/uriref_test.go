package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
)

// A CloudEvent whose source is not a URI-reference, or whose dataschema is not one, is refused
// with 400 naming the attribute, in every publish form: the CloudEvents SDKs refuse such an
// event on receipt, so accepting it would accept an event no subscriber can take.
func TestCloudEventsURIAttributesAreChecked(t *testing.T) {
	s := newServer(t, router.Config{InsecureDev: true})
	if _, err := s.r.CreateTopic(context.Background(), "ce-orders", router.TopicSpec{InputSchema: "CloudEventSchemaV1_0"}); err != nil {
		t.Fatal(err)
	}
	const classic = "/topics/ce-orders/api/events?api-version=2018-01-01"
	const namespace = "/topics/ns-orders:publish?api-version=2023-11-01"
	binary := func(attr, v string) http.Header {
		h := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"b1"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}
		h.Set("Ce-"+attr, v)
		return h
	}
	for name, c := range map[string]struct {
		path, ctype, body string
		header            http.Header
		field             string
	}{
		"classic batch, source":        {classic, "application/cloudevents-batch+json", `[{"specversion":"1.0","id":"c31","source":"::not a uri ref%","type":"T"}]`, nil, "source"},
		"classic batch, dataschema":    {classic, "application/cloudevents-batch+json", `[{"specversion":"1.0","id":"c31","source":"/s","type":"T"},{"specversion":"1.0","id":"c32","source":"/s","type":"T","dataschema":"not a uri"}]`, nil, "dataschema"},
		"namespace single, source":     {namespace, "application/cloudevents+json", `{"specversion":"1.0","id":"c31","source":"/a%zz","type":"T"}`, nil, "source"},
		"namespace single, dataschema": {namespace, "application/cloudevents+json", `{"specversion":"1.0","id":"c31","source":"/s","type":"T","dataschema":"http://[::1/x"}`, nil, "dataschema"},
		"binary, ce-source":            {namespace, "application/json", `{}`, binary("Source", "a%2520b%20c"), "source"},
		"binary, ce-dataschema":        {namespace, "application/json", `{}`, binary("Dataschema", "https://exa mple.com/"), "dataschema"},
	} {
		t.Run(name, func(t *testing.T) {
			status, body := s.post(c.path, c.ctype, []byte(c.body), c.header)
			var e struct {
				Error struct{ Details []struct{ Message string } }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("status %d body %q: %v", status, body, err)
			}
			if status != 400 || len(e.Error.Details) != 1 || !strings.Contains(e.Error.Details[0].Message, `field "`+c.field+`": is `) || !strings.Contains(e.Error.Details[0].Message, "not a URI-reference") {
				t.Fatalf("got %d %s, want 400 with one detail saying %s is not a URI-reference", status, body, c.field)
			}
		})
	}
	if got := s.r.Metrics().Snapshot().Sum("PublishSuccessCount", "ce-orders") + s.r.Metrics().Snapshot().Sum("PublishSuccessCount", "ns-orders"); got != 0 {
		t.Errorf("%d events accepted, want none", got)
	}
	// Valid URI-references, relative ones included, are taken.
	for _, v := range []string{"/mycontext", "mycontext", "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66", "mailto:a@example.com", "https://example.com/x?y#z"} {
		body := `[{"specversion":"1.0","id":"ok","source":"` + v + `","type":"T","dataschema":"` + v + `"}]`
		if status, resp := s.post(classic, "application/cloudevents-batch+json", []byte(body), nil); status != 200 {
			t.Errorf("source and dataschema %q: %d %s, want 200", v, status, resp)
		}
	}
}
