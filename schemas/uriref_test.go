package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// uriRefs are values of a CloudEvent's source or dataschema: valid says whether each is an
// RFC 3986 URI-reference.
var uriRefs = []struct {
	v     string
	valid bool
}{
	{"/mycontext", true},
	{"mycontext", true},
	{"s", true},
	{"./a:b", true},
	{"../up/one", true},
	{"#fragment", true},
	{"#", true},
	{"?q=1&r=2", true},
	{"//host.example/path", true},
	{"/a%20b%C3%A9", true},
	{"/subscriptions/x/resourceGroups/rg/providers/Microsoft.EventGrid/topics/t#sub/1", true},
	{"/sub-delims/!$&'()*+,;=:@", true},
	{"https://example.com/storage/tenant/container", true},
	{"https://user:pw@example.com:8080/p/a/t/h?query=1#frag", true},
	{"https://example.com/schemas/order.json#/definitions/order", true},
	{"http://[::1]:8080/x", true},
	{"http://[2001:db8::7]/", true},
	{"http://[v7.fe:80]/", true},
	{"http://192.0.2.1/", true},
	{"http://example.com:/", true},
	{"urn:event:from:myapi/resource/123", true},
	{"urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66", true},
	{"mailto:cncf-wg-serverless@lists.cncf.io", true},
	{"tag:example.com,2024:orders", true},
	{"a:", true},
	{"A1+-.:x", true},

	{"::not a uri ref%", false},
	{"not a uri", false},
	{"a b", false},
	{" /lead", false},
	{"/trail ", false},
	{"/a%zz", false},
	{"/a%2", false},
	{"/100%", false},
	{"/é", false},
	{"1a:b", false},
	{":x", false},
	{"my_app:x", false},
	{"/a#b#c", false},
	{"/a[0]", false},
	{"/a?q=[1]", false},
	{"/a#[x]", false},
	{"http://[::1/x", false},
	{"http://[::1]x/", false},
	{"http://[zz]/", false},
	{"http://[192.0.2.1]/", false},
	{"http://[fe80::1%25eth0]/", false},
	{"http://host:80a/", false},
	{"http://a@b@c/", false},
	{"http://ho st/", false},
	{`C:\path`, false},
	{"<x>", false},
	{`a"b`, false},
	{"/a|b", false},
	{"/{x}", false},
	{"/a^b", false},
	{"/a`b", false},
	{"/tab\there", false},
	{"/nl\nhere", false},
}

// TestCloudEventsSourceAndDataschemaAreURIs checks source and dataschema as URI-references, in
// a structured event, a batch and binary mode.
func TestCloudEventsSourceAndDataschemaAreURIs(t *testing.T) {
	type check struct {
		attr  string
		ok    bool
		field string
	}
	for _, u := range uriRefs {
		checks := []check{{"source", u.valid, "source"}, {"dataschema", u.valid, "dataschema"}}
		for _, c := range checks {
			t.Run(c.attr+"="+u.v, func(t *testing.T) {
				const want = "not a URI-reference"
				decode := map[string]func() error{
					"single": func() error {
						_, err := schemas.DecodeCloudEvents([]byte(ceEvent(c.attr+"="+jsonString(u.v))), schemas.NamespaceLimits)
						return err
					},
					"batch": func() error {
						_, err := schemas.DecodeCloudEvents([]byte(array(ceEvent(), ceEvent(c.attr+"="+jsonString(u.v)))), schemas.NamespaceLimits)
						return err
					},
					"binary": func() error {
						attrs := map[string]string{"specversion": "1.0", "id": "b1", "source": "/orders", "type": "T"}
						// The header carries the value percent-encoded, as the HTTP binding asks.
						attrs[c.attr] = strings.NewReplacer("%", "%25", " ", "%20", "\t", "%09", "\n", "%0A", `"`, "%22", "é", "%C3%A9").Replace(u.v)
						_, err := schemas.DecodeCloudEventBinary(attrs, "application/json", []byte(`{}`), schemas.NamespaceLimits)
						return err
					},
				}
				for mode, fn := range decode {
					err := fn()
					if c.ok {
						if err != nil {
							t.Errorf("%s: %v, want the event accepted", mode, err)
						}
						continue
					}
					index := 0
					if mode == "batch" {
						index = 1
					}
					ves := schemas.ValidationErrors(err)
					if len(ves) != 1 || ves[0].Index != index || ves[0].Field != c.field || !strings.Contains(ves[0].Reason, want) {
						t.Errorf("%s: got %v, want one problem of event %d's %s saying %q", mode, err, index, c.field, want)
					}
				}
			})
		}
	}
}

// TestConvertedDataSchemaIsAURIReference checks that an Event Grid event delivered as a
// CloudEvent has a dataschema that a CloudEvents publish accepts: "#"+dataVersion as Azure
// writes it, with what a URI fragment cannot hold percent-encoded, and every '%' too, so the
// dataVersion can be read back from it.
func TestConvertedDataSchemaIsAURIReference(t *testing.T) {
	for dataVersion, want := range map[string]string{
		"":          "#",
		"1.0":       "#1.0",
		"v2/a?b:c@": "#v2/a?b:c@",
		"1%41":      "#1%2541",
		"1 0":       "#1%200",
		"é#[]%":     "#%C3%A9%23%5B%5D%25",
		"100%":      "#100%25",
	} {
		events, err := schemas.DecodeEventGrid([]byte(array(egEvent(`dataVersion=`+jsonString(dataVersion)))), topicID, schemas.ClassicLimits)
		if err != nil {
			t.Fatalf("dataVersion %q: %v", dataVersion, err)
		}
		body, _, err := schemas.EncodeBatch(nil, schemas.EventGrid, schemas.CloudEvents, topicID, events)
		if err != nil {
			t.Fatalf("dataVersion %q: EncodeBatch: %v", dataVersion, err)
		}
		var got struct{ DataSchema string }
		if err := json.Unmarshal(body, &got); err != nil || got.DataSchema != want {
			t.Errorf("dataVersion %q: dataschema %q (%v), want %q", dataVersion, got.DataSchema, err, want)
		}
		if _, err := schemas.DecodeCloudEvents(body, schemas.NamespaceLimits); err != nil {
			t.Errorf("dataVersion %q: the delivered event is refused as a publish: %v\n%s", dataVersion, err, body)
		}
	}
}

func jsonString(v string) string { b, _ := json.Marshal(v); return string(b) }
