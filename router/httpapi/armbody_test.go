package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
)

// adminServer is a router with the admin token "tok", a Sink "null" and the topic "orders",
// behind the HTTP API.
func adminServer(t *testing.T) (*router.Router, *httptest.Server) {
	t.Helper()
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(r))
	t.Cleanup(srv.Close)
	return r, srv
}

// errorMessage is the message of an error answer.
func errorMessage(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

// TestAdminTopLevelMembersAreChecked: a misspelt member at the top of an ARM body is an
// error, as one inside properties is, and so are a body that is not an object and a member
// of the wrong shape or value; each answer names the member and what to send, and nothing is
// created. The members of Azure's resource are accepted and ignored, so a body written for
// Azure, or read back from egrid, is taken.
func TestAdminTopLevelMembersAreChecked(t *testing.T) {
	_, srv := adminServer(t)
	const mapping = `"inputSchema":"CustomEventSchema","inputSchemaMapping":{"inputSchemaMappingType":"%s","properties":{"eventType":{"defaultValue":"T"}}}`
	for _, c := range []struct{ name, body, want string }{
		{"a misspelt properties", `{"propertes":{"inputSchema":"CloudEventSchemaV1_0"}}`, `"propertes" is not a member of a topic's ARM body: send the definition in "properties" (id, name, type, location, tags, identity, sku, kind, systemData and extendedLocation are accepted too`},
		{"null", `null`, `the body is null: send a topic as a JSON object`},
		{"an array", `[]`, `the body is an array: send a topic as a JSON object`},
		{"a number", `5`, `the body is a number: send a topic as a JSON object`},
		{"a string", `"s"`, `the body is a string: send a topic as a JSON object`},
		{"the resource kind Namespace", `{"kind":"Namespace","properties":{}}`, `kind: "Namespace" is not a kind egrid serves: send Azure, or leave it out (a namespace topic is {"properties": {"kind": "namespace"}})`},
		{"another resource's type", `{"type":"Microsoft.EventGrid/domains","properties":{}}`, `type: "Microsoft.EventGrid/domains" is not this resource's type: send Microsoft.EventGrid/topics`},
		{"tags of another shape", `{"tags":"x"}`, `tags: is a string; send an object of string values`},
		{"a tag that is not a string", `{"tags":{"n":1}}`, `tags: "n" is a number; send a string`},
		{"a location that is not a string", `{"location":{}}`, `location: is an object; send a string`},
		{"an Arc topic", `{"extendedLocation":{"name":"x","type":"CustomLocation"}}`, `extendedLocation: places an Azure Arc topic`},
		{"an unknown mapping type", `{"properties":{` + strings.Replace(mapping, "%s", "Xml", 1) + `}}`, `inputSchemaMapping.inputSchemaMappingType "Xml" is invalid: use Json`},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/adm-t2", c.body)
			if msg := errorMessage(body); status != 400 || !strings.Contains(msg, c.want) {
				t.Errorf("%d %q, want 400 saying %s", status, msg, c.want)
			}
			if status, body := adminDo(t, srv, "tok", "GET", "/admin/topics/adm-t2", ""); status != 404 {
				t.Errorf("the refused topic reads %d %v, want 404", status, body)
			}
		})
	}

	azure := `{"id":"/subscriptions/x/resourceGroups/g/providers/Microsoft.EventGrid/topics/adm-t3","name":"adm-t3",
		"type":"microsoft.eventgrid/topics","location":"westeurope","tags":{"env":"test"},"identity":{"type":"None"},
		"sku":{"name":"Basic"},"kind":"azure","systemData":{"createdBy":"me"},"extendedLocation":null,
		"properties":{` + strings.Replace(mapping, "%s", "json", 1) + `}}`
	if status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/adm-t3", azure); status != 201 {
		t.Fatalf("an Azure topic body: %d %v, want 201", status, body)
	}
	status, read := adminDo(t, srv, "tok", "GET", "/admin/topics/adm-t3", "")
	back, _ := json.Marshal(read)
	if status != 200 {
		t.Fatalf("GET: %d %v", status, read)
	}
	if status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/adm-t3", string(back)); status != 200 {
		t.Errorf("a topic read back, PUT again: %d %v, want 200", status, body)
	}
	if status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/adm-t4", ""); status != 201 {
		t.Errorf("an empty body: %d %v, want 201 (a topic of the defaults)", status, body)
	}

	const dest = `"destination":{"endpointType":"Sink","properties":{"sinkName":"null"}}`
	for _, c := range []struct{ name, body, want string }{
		{"a misspelt properties", `{"propertes":{` + dest + `}}`, `"propertes" is not a member of an event subscription's ARM body: send the definition in "properties" (id, name, type, location and systemData are accepted too`},
		{"tags, which a subscription has not", `{"tags":{"env":"prod"},"properties":{` + dest + `}}`, `tags: an event subscription has no tags (Azure's eventSubscriptions resource has none) and they would not be kept: leave them out, or put labels in properties.labels`},
		{"a location of another shape", `{"location":["westeurope"],"properties":{` + dest + `}}`, `location: is an array; send a string`},
		{"null", `null`, `the body is null: send an event subscription as a JSON object`},
		{"an array", `[]`, `the body is an array: send an event subscription as a JSON object`},
		{"a topic's type", `{"type":"Microsoft.EventGrid/topics","properties":{` + dest + `}}`, `type: "Microsoft.EventGrid/topics" is not this resource's type`},
		{"two problems", `{"nme":"x","id":5,"properties":{` + dest + `}}`, `2 problems: id: is a number; send a string; "nme" is not a member`},
	} {
		t.Run("subscription "+c.name, func(t *testing.T) {
			status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/orders/eventSubscriptions/sub-1", c.body)
			if msg := errorMessage(body); status != 400 || !strings.Contains(msg, c.want) {
				t.Errorf("%d %q, want 400 saying %s", status, msg, c.want)
			}
			if status, body := adminDo(t, srv, "tok", "GET", "/admin/topics/orders/eventSubscriptions/sub-1", ""); status != 404 {
				t.Errorf("the refused subscription reads %d %v, want 404", status, body)
			}
		})
	}
	// A location, which Azure's resource has not, is taken and ignored, as Azure does: ARM
	// templates have sent one (Microsoft's event-grid quickstart did). Null tags are no tags.
	sub := `{"id":"x","name":"sub-2","type":"Microsoft.EventGrid/topics/eventSubscriptions","location":"westeurope","tags":null,"systemData":{},"properties":{` + dest + `}}`
	if status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/orders/eventSubscriptions/sub-2", sub); status != 201 {
		t.Fatalf("an Azure subscription body: %d %v, want 201", status, body)
	}
	status, read = adminDo(t, srv, "tok", "GET", "/admin/topics/orders/eventSubscriptions/sub-2", "")
	back, _ = json.Marshal(read)
	if status != 200 {
		t.Fatalf("GET: %d %v", status, read)
	}
	if status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/orders/eventSubscriptions/sub-2", string(back)); status != 200 {
		t.Errorf("a subscription read back, PUT again: %d %v, want 200", status, body)
	}
}

// TestAdminErrorsNameTheMemberNotGoTypes: wherever the admin API decodes a body, a value of
// the wrong JSON type and a time that does not parse are named by their JSON path, with what
// to send — not by egrid's Go types or Go's time layout.
func TestAdminErrorsNameTheMemberNotGoTypes(t *testing.T) {
	r, srv := adminServer(t)
	if err := r.CreateSubscription(context.Background(), "orders", "sub-1", router.SubscriptionSpec{Destination: router.SinkDestination("null")}); err != nil {
		t.Fatal(err)
	}
	const dest = `"destination":{"endpointType":"Sink","properties":{"sinkName":"null"}}`
	for _, c := range []struct{ name, method, path, body, want string }{
		{"a topic array", "PUT", "/admin/topics/x-1", `[]`, `the body is an array: send a topic as a JSON object, {"properties": {...}}`},
		{"a topic number", "PUT", "/admin/topics/x-1", `5`, `the body is a number: send a topic`},
		{"a topic string", "PUT", "/admin/topics/x-1", `"s"`, `the body is a string: send a topic`},
		{"topic tags of a string", "PUT", "/admin/topics/x-1", `{"tags":"x"}`, `tags: is a string; send an object of string values`},
		{"topic properties of an array", "PUT", "/admin/topics/x-1", `{"properties":[]}`, `properties: is a JSON array; send an object`},
		{"a subscription array", "PUT", "/admin/topics/orders/eventSubscriptions/sub-2", `[1]`, `the body is an array: send an event subscription`},
		{"an expiration time that does not parse", "PUT", "/admin/topics/orders/eventSubscriptions/sub-2", `{"properties":{` + dest + `,"expirationTimeUtc":"bad"}}`,
			`properties.expirationTimeUtc: "bad" is not a date and time: send one in RFC 3339 form, such as 2026-01-02T15:04:05Z`},
		{"an expiration time out of range", "PUT", "/admin/topics/orders/eventSubscriptions/sub-2", `{"properties":{` + dest + `,"ExpirationTimeUTC":"2026-13-01T00:00:00Z"}}`,
			`properties.expirationTimeUtc: "2026-13-01T00:00:00Z" is not a date and time`},
		{"an expiration time of a number", "PUT", "/admin/topics/orders/eventSubscriptions/sub-2", `{"properties":{` + dest + `,"expirationTimeUtc":5}}`,
			`properties.expirationTimeUtc: is a number; send a date and time as an RFC 3339 string`},
		{"a replay array", "POST", "/admin/topics/orders/eventSubscriptions/sub-1/deadLetters/replay", `[]`, `the body is not a replay request: the body: is a JSON array; send an object`},
		{"a replay time that does not parse", "POST", "/admin/topics/orders/eventSubscriptions/sub-1/deadLetters/replay", `{"since":"yesterday"}`, `the body is not a replay request: since: "yesterday" is not a date and time`},
		{"a replay flag of a string", "POST", "/admin/topics/orders/eventSubscriptions/sub-1/deadLetters/replay", `{"dryRun":"yes"}`, `the body is not a replay request: dryRun: is a JSON string; send true or false`},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := adminDo(t, srv, "tok", c.method, c.path, c.body)
			msg := errorMessage(body)
			if status != 400 || !strings.Contains(msg, c.want) {
				t.Errorf("%d %q, want 400 saying %s", status, msg, c.want)
			}
			for _, goism := range []string{"Go value", "Go struct", "struct {", "2006-01-02", "UnmarshalJSON", "httpapi.", "router."} {
				if strings.Contains(msg, goism) {
					t.Errorf("the message %q speaks of Go (%q)", msg, goism)
				}
			}
		})
	}
}

// TestAdminRefusesReservedTopicNames: PUT of a new topic named with Azure's reserved words is
// 400 saying why.
func TestAdminRefusesReservedTopicNames(t *testing.T) {
	_, srv := adminServer(t)
	for _, name := range []string{"Microsoft-x", "EventGrid-abc", "System-abc"} {
		status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/"+name, `{}`)
		if msg := errorMessage(body); status != 400 || !strings.Contains(msg, "is reserved: names beginning with Microsoft-, EventGrid- or System-") {
			t.Errorf("PUT %s: %d %q, want 400 saying the name is reserved", name, status, msg)
		}
	}
}

// TestAdminRefusesKeysThatCannotBeSent: a topic key of blanks, or holding a line end, is
// refused naming the key, and a publish with a blank key is not let in.
func TestAdminRefusesKeysThatCannotBeSent(t *testing.T) {
	_, srv := adminServer(t)
	for _, c := range []struct{ body, want string }{
		{`{"properties":{"key1":" "}}`, "key1 is blank"},
		{`{"properties":{"key1":"a\nb-and-more-to-be-long"}}`, "key1 holds a control character (byte 1)"},
		{`{"properties":{"key2":"short"}}`, "key2 has 5 characters; use 16 to 1024 printable ASCII characters"},
	} {
		status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/orders", c.body)
		if msg := errorMessage(body); status != 400 || !strings.Contains(msg, c.want) {
			t.Errorf("PUT %s: %d %q, want 400 saying %s", c.body, status, msg, c.want)
		}
	}
	resp, err := srv.Client().Post(srv.URL+"/topics/orders/api/events?api-version=2018-01-01&aeg-sas-key=%20", "application/json",
		strings.NewReader(`[{"id":"1","eventType":"t","subject":"s","eventTime":"2026-01-01T00:00:00Z","data":{},"dataVersion":"1"}]`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("publish with aeg-sas-key=%%20: %d, want 401", resp.StatusCode)
	}
}

// TestAdminUnknownMembersAreNamedByPath: a member egrid does not take is refused wherever it
// is in a definition, named by its full JSON path with the members its object takes, as a
// misspelt top-level member is; every one is listed, and nothing is stored. Before, one
// inside properties was answered `properties: json: unknown field "bogus"`, which did not say
// where it was. Members spelt in another case are the members they name.
func TestAdminUnknownMembersAreNamedByPath(t *testing.T) {
	r, srv := adminServer(t)
	if err := r.CreateSubscription(context.Background(), "orders", "sub-1", router.SubscriptionSpec{Destination: router.SinkDestination("null")}); err != nil {
		t.Fatal(err)
	}
	const sub = "/admin/topics/orders/eventSubscriptions/sub-2"
	const dest = `"destination":{"endpointType":"Sink","properties":{"sinkName":"null"}}`
	const mapping = `"inputSchema":"CustomEventSchema","inputSchemaMapping":{"inputSchemaMappingType":"Json","properties":{"eventType":{"defaultValue":"T"}%s}%s}`
	for _, c := range []struct{ name, path, body, want string }{
		{"in properties", sub, `{"properties":{` + dest + `,"bogus":1}}`,
			`"properties.bogus" is not a member of properties: check its spelling (properties takes destination, filter, retryPolicy,`},
		{"in the destination's properties", sub, `{"properties":{"destination":{"endpointType":"Sink","properties":{"sinkName":"null","bogus":1}}}}`,
			`"properties.destination.properties.bogus" is not a member of properties.destination.properties: check its spelling (properties.destination.properties takes endpointUrl, endpointBaseUrl,`},
		{"in an advanced filter", sub, `{"properties":{` + dest + `,"filter":{"advancedFilters":[{"operatorType":"StringIn","key":"subject","values":["a"]},{"operatorType":"StringIn","key":"subject","values":["b"],"bogus":1}]}}}`,
			`"properties.filter.advancedFilters[1].bogus" is not a member of properties.filter.advancedFilters[1]: check its spelling (properties.filter.advancedFilters[1] takes operatorType, key, value and values)`},
		{"in the retry policy", sub, `{"properties":{` + dest + `,"retryPolicy":{"maxDeliveryAttempts":3,"bogus":1}}}`,
			`"properties.retryPolicy.bogus" is not a member of properties.retryPolicy: check its spelling (properties.retryPolicy takes maxDeliveryAttempts, eventTimeToLiveInMinutes, profile and honorRetryAfter)`},
		{"in a delivery header", sub, `{"properties":{"destination":{"endpointType":"Sink","properties":{"sinkName":"null","deliveryAttributeMappings":[{"name":"X-A","type":"Static","properties":{"value":"v","bogus":1}}]}}}}`,
			`"properties.destination.properties.deliveryAttributeMappings[0].properties.bogus" is not a member of`},
		{"in the dead-letter destination", sub, `{"properties":{` + dest + `,"deadLetterDestination":{"endpointType":"StorageBlob","properties":{"blobContainerName":"dl","bogus":1}}}}`,
			`"properties.deadLetterDestination.properties.bogus" is not a member of properties.deadLetterDestination.properties: check its spelling (properties.deadLetterDestination.properties takes blobContainerName and resourceId)`},
		{"two of them", sub, `{"properties":{"bogus":1,` + dest + `,"retryPolicy":{"bogus2":1}}}`,
			`2 problems: "properties.bogus" is not a member of properties: check its spelling (`},
		{"in a topic's mapping properties", "/admin/topics/t-map", `{"properties":{` + fmt.Sprintf(mapping, `,"bogus":{}`, ``) + `}}`,
			`"properties.inputSchemaMapping.properties.bogus" is not a member of properties.inputSchemaMapping.properties: check its spelling (properties.inputSchemaMapping.properties takes id, topic, eventTime, eventType, subject and dataVersion)`},
		{"in a topic's field mapping", "/admin/topics/t-map", `{"properties":{` + fmt.Sprintf(mapping, `,"subject":{"sourceFeld":"s"}`, ``) + `}}`,
			`"properties.inputSchemaMapping.properties.subject.sourceFeld" is not a member of properties.inputSchemaMapping.properties.subject: check its spelling (properties.inputSchemaMapping.properties.subject takes sourceField and defaultValue)`},
		{"in a topic's mapping", "/admin/topics/t-map", `{"properties":{` + fmt.Sprintf(mapping, ``, `,"bogus":1`) + `}}`,
			`"properties.inputSchemaMapping.bogus" is not a member of properties.inputSchemaMapping: check its spelling (properties.inputSchemaMapping takes inputSchemaMappingType and properties)`},
		{"in a replay request", "/admin/topics/orders/eventSubscriptions/sub-1/deadLetters/replay", `{"dryRun":true,"bogus":1,"bogus2":2}`,
			`the body is not a replay request: "bogus" is not a member of the body: check its spelling (the body takes since, until, reason, dryRun and wait); and 1 more members it does not take`},
	} {
		t.Run(c.name, func(t *testing.T) {
			method := "PUT"
			if strings.HasSuffix(c.path, "/replay") {
				method = "POST"
			}
			status, body := adminDo(t, srv, "tok", method, c.path, c.body)
			if msg := errorMessage(body); status != 400 || !strings.Contains(msg, c.want) {
				t.Errorf("%d %q, want 400 saying %s", status, msg, c.want)
			}
			if method == "PUT" {
				if status, body := adminDo(t, srv, "tok", "GET", c.path, ""); status != 404 {
					t.Errorf("the refused definition reads %d %v, want 404", status, body)
				}
			}
		})
	}
	// A body of 60 000 unknown members is answered with the first 20 and a count, in
	// kilobytes.
	var many strings.Builder
	for i := range 60000 {
		fmt.Fprintf(&many, `"x%d":1,`, i)
	}
	status, body := adminDo(t, srv, "tok", "PUT", sub, `{"properties":{`+many.String()+dest+`}}`)
	if msg := errorMessage(body); status != 400 || !strings.HasPrefix(msg, `60000 problems: "properties.x0" is not a member`) || !strings.HasSuffix(msg, "and 59980 more not listed here: fix these and send the definition again to see the rest") || len(msg) > 16<<10 {
		t.Errorf("60 000 unknown members: %d, a %d-byte message %.200q", status, len(msg), msg)
	}
	// Names in another case are the members they name, as encoding/json matches them.
	if status, body := adminDo(t, srv, "tok", "PUT", sub, `{"Properties":{"Destination":{"EndpointType":"Sink","Properties":{"SinkName":"null"}},"RetryPolicy":{"MaxDeliveryAttempts":3},"Filter":{"AdvancedFilters":[{"OperatorType":"StringIn","Key":"subject","Values":["a"]}]}}}`); status != 201 {
		t.Errorf("a body in other cases: %d %v, want 201", status, body)
	}
}

// TestAdminPropertiesNullIsAbsent: "properties": null is taken as its absence, as Azure's
// REST spec has properties optional for topics and event subscriptions: a topic of the
// defaults, an event subscription refused for the destination it lacks. properties of another
// JSON type is refused naming it. An inputSchemaMappingType left out, null or empty is Json.
func TestAdminPropertiesNullIsAbsent(t *testing.T) {
	_, srv := adminServer(t)
	if status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/t-null", `{"properties":null}`); status != 201 {
		t.Errorf("a topic of null properties: %d %v, want 201", status, body)
	}
	for _, c := range []struct{ path, body, want string }{
		{"/admin/topics/orders/eventSubscriptions/sub-1", `{"properties":null}`, `destination.endpointType: required`},
		{"/admin/topics/orders/eventSubscriptions/sub-1", `{"properties":true}`, `properties: is a JSON bool; send an object`},
		{"/admin/topics/t-bad", `{"properties":5}`, `properties: is a JSON number; send an object`},
		{"/admin/topics/t-bad", `{"properties":"x"}`, `properties: is a JSON string; send an object`},
	} {
		if status, body := adminDo(t, srv, "tok", "PUT", c.path, c.body); status != 400 || !strings.Contains(errorMessage(body), c.want) {
			t.Errorf("PUT %s %s: %d %q, want 400 saying %s", c.path, c.body, status, errorMessage(body), c.want)
		}
	}
	for i, typ := range []string{``, `"inputSchemaMappingType":null,`, `"inputSchemaMappingType":"",`, `"inputSchemaMappingType":"JSON",`} {
		body := `{"properties":{"inputSchema":"CustomEventSchema","inputSchemaMapping":{` + typ + `"properties":{"eventType":{"defaultValue":"T"}}}}}`
		if status, resp := adminDo(t, srv, "tok", "PUT", fmt.Sprintf("/admin/topics/t-map-%d", i), body); status != 201 {
			t.Errorf("a mapping with %s: %d %v, want 201", typ, status, resp)
		}
	}
}
