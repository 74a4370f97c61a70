package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/schemas"
)

// The fuzz targets here send hostile requests through the whole HTTP handler of a router with
// an in-memory store, and check what every answer must be: no panic (a panic answers 500,
// which fails the target), an error answer with Event Grid's JSON error body and a message
// saying what is wrong, an answer bounded by its request, and definitions that are accepted
// read back as the PUT answered them and can be PUT again unchanged.

const fuzzToken = "fuzz-admin-token"

// noNetwork is the HTTP client of the fuzzed routers: nothing they do may leave the process.
var noNetwork = &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
	return nil, errors.New("the fuzz tests make no connections")
})}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func newFuzzAPI(f testing.TB) (*router.Router, *httpapi.API) {
	f.Helper()
	r, err := router.New(router.Config{AdminToken: fuzzToken, SkipEndpointValidation: true}, router.Deps{HTTPClient: noNetwork})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = r.Close(context.Background()) })
	return r, httpapi.New(r)
}

// fuzzDo serves one request and returns its answer.
func fuzzDo(h http.Handler, method, path string, header http.Header, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	for k, vs := range header {
		req.Header[k] = vs
	}
	if _, ok := header["Authorization"]; !ok {
		req.Header.Set("Authorization", "Bearer "+fuzzToken)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// checkAnswer checks what every answer must be, whatever the request: a 5xx never (the store is
// in memory and cannot fail), an error in Event Grid's JSON shape with a message, and an answer
// no larger than maxBytes.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder, maxBytes int) {
	t.Helper()
	body := rec.Body.Bytes()
	if rec.Code >= 500 {
		t.Fatalf("%s: answered %d: %.500s", what, rec.Code, body)
	}
	if len(body) > maxBytes {
		t.Fatalf("%s: a %d-byte answer, over the bound of %d: %.300s", what, len(body), maxBytes, body)
	}
	if rec.Code < 400 {
		return
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s: answered %d with Content-Type %q, want JSON: %.300s", what, rec.Code, ct, body)
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Details []struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%s: answered %d with a body that is not JSON (%v): %.300s", what, rec.Code, err, body)
	}
	if e.Error.Code == "" || strings.TrimSpace(e.Error.Message) == "" {
		t.Fatalf("%s: answered %d without an error code and message: %.300s", what, rec.Code, body)
	}
	for i, d := range e.Error.Details {
		if d.Code == "" || strings.TrimSpace(d.Message) == "" {
			t.Fatalf("%s: answered %d with detail %d empty: %.300s", what, rec.Code, i, body)
		}
	}
}

// errorBound is the most an error answer to a request of n bytes may be: a few kilobytes of
// explanation, values it repeats shortened.
func errorBound(n int) int { return 16<<10 + 2*n }

// okBound is the most a definition read or PUT answer may be: the definition, each byte
// escaped into at most six, and the fields the server adds.
func okBound(n int) int { return 16<<10 + 6*n }

// properties returns the properties of an ARM resource answer, without the fields that change
// between reads (deliveryState).
func properties(t *testing.T, what string, body []byte) map[string]any {
	t.Helper()
	var res struct {
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatalf("%s: the answer is not JSON (%v): %.300s", what, err, body)
	}
	if res.Properties == nil {
		t.Fatalf("%s: the answer has no properties: %.300s", what, body)
	}
	delete(res.Properties, "deliveryState")
	return res.Properties
}

// FuzzAdminDefinitions PUTs a topic and an event subscription with fuzzed bodies. Every answer
// is checked (checkAnswer); a definition that is accepted is read back with the properties
// its PUT answered, and PUT again as read it is accepted unchanged (a read-back definition
// can be applied again, as ARM's can).
func FuzzAdminDefinitions(f *testing.F) {
	seeds := []struct{ topic, sub string }{
		{`{}`, `{}`},
		{`{"properties":{"inputSchema":"EventGridSchema"}}`, `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://127.0.0.1/x?code=1","maxEventsPerBatch":10,"preferredBatchSizeInKilobytes":64,"deliveryAttributeMappings":[{"name":"X-A","type":"Static","properties":{"value":"v","isSecret":true}},{"name":"X-B","type":"Dynamic","properties":{"sourceField":"data.k"}}]}},"filter":{"subjectBeginsWith":"/a","subjectEndsWith":".jpg","includedEventTypes":["t1","t2"],"isSubjectCaseSensitive":true,"enableAdvancedFilteringOnArrays":true,"advancedFilters":[{"operatorType":"NumberIn","key":"data.n","values":[1,2.5]},{"operatorType":"StringContains","key":"subject","values":["x"]},{"operatorType":"NumberInRange","key":"data.r","values":[[0,1]]},{"operatorType":"IsNullOrUndefined","key":"data.z"},{"operatorType":"BoolEquals","key":"data.b","value":true}]},"retryPolicy":{"maxDeliveryAttempts":5,"eventTimeToLiveInMinutes":60},"eventDeliverySchema":"CloudEventSchemaV1_0","labels":["a","b"]}}`},
		{`{"properties":{"inputSchema":"CloudEventSchemaV1_0"}}`, `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"http://localhost:1/hook"}},"deadLetterDestination":{"endpointType":"StorageBlob","properties":{"blobContainerName":"dl"}},"expirationTimeUtc":"2999-01-01T00:00:00Z"}}`},
		{`{"properties":{"kind":"namespace"}}`, `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"receiveLockDurationInSeconds":120,"maxDeliveryCount":3,"eventTimeToLive":"P1DT2H"}},"filter":{"advancedFilters":[{"operatorType":"StringNotIn","key":"type","values":["a"]}]}}}`},
		{`{"properties":{"inputSchema":"CustomEventSchema","inputSchemaMapping":{"inputSchemaMappingType":"Json","properties":{"id":{"sourceField":"myId"},"subject":{"sourceField":"s","defaultValue":"d"},"eventType":{"defaultValue":"t"},"dataVersion":{"defaultValue":"1"}}}}}`, `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://127.0.0.1/"}},"eventDeliverySchema":"CustomInputSchema"}}`},
		{`{"properties":{"kind":"NameSpace","inputSchema":"cloudeventschemav1_0"}}`, `{"properties":{"deliveryConfiguration":{"deliveryMode":"queue"},"filter":{"advancedFilters":[{"operatorType":"NumberGreaterThan","key":"data.a.b.c","value":1e308}]}}}`},
		{`[`, `{"properties":{"filter":{"advancedFilters":[{"operatorType":"StringIn","key":"\ud800","values":["\u0000"]}]}}}`},
		{"{\"properties\":{\"kind\":\"\xff\"}}", "{\"properties\":{\"labels\":[\"\xff\x00\"],\"filter\":{\"subjectBeginsWith\":\"\xed\xa0\x80\"}}}"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.topic), []byte(s.sub))
	}
	_, api := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, topicBody, subBody []byte) {
		putDefinitions(t, api, topicBody, subBody)
	})
}

// putDefinitions PUTs a topic and then an event subscription of it, checks both answers and
// the round trip of what is accepted, and deletes the topic.
func putDefinitions(t *testing.T, api http.Handler, topicBody, subBody []byte) {
	t.Helper()
	const topicPath = "/admin/topics/fuzz-topic"
	const subPath = topicPath + "/eventSubscriptions/fuzz-sub"
	defer fuzzDo(api, http.MethodDelete, topicPath, nil, nil)

	put := fuzzDo(api, http.MethodPut, topicPath, nil, topicBody)
	if put.Code >= 300 {
		checkAnswer(t, "PUT topic", put, errorBound(len(topicBody)))
		return
	}
	checkAnswer(t, "PUT topic", put, okBound(len(topicBody)))
	roundTrip(t, api, "topic", topicPath, put)

	put = fuzzDo(api, http.MethodPut, subPath, nil, subBody)
	if put.Code >= 300 {
		checkAnswer(t, "PUT event subscription", put, errorBound(len(subBody)))
		return
	}
	checkAnswer(t, "PUT event subscription", put, okBound(len(subBody)))
	roundTrip(t, api, "event subscription", subPath, put)
}

// FuzzSubscriptionFields fills the fields of a well-formed topic and event subscription with
// fuzzed strings and numbers, so the fuzzer spends its time in the checks of the values — filters
// and advanced filters, delivery, retry and dead-letter settings, queue settings — rather than
// in JSON syntax. The answers are checked as FuzzAdminDefinitions checks them.
func FuzzSubscriptionFields(f *testing.F) {
	// shape: bits 0-1 the kind of the advanced filter's value (string, number, range, bool),
	// bit 2 a queue subscription, bit 3 a Dynamic delivery header, bits 4-5 the topic, bit 6
	// "value" instead of "values", bit 7 a dead-letter destination.
	f.Add(uint8(1), "", "NumberIn", "data.n", "x", 1.5, int64(60), int64(10), "https://127.0.0.1/hook", "X-Key", "v", "/a", "t1", "", false)
	f.Add(uint8(1|4|64), "", "NumberGreaterThan", "data.n", "", 2.0, int64(60), int64(5), "", "", "", "/a", "a,b", "P1D", true)
	f.Add(uint8(0|16), "CloudEventSchemaV1_0", "StringContains", "subject", "x", 0.0, int64(1), int64(1), "https://127.0.0.1/", "X-A", "\u0000", "", "", "eventgrid-2019", true)
	f.Add(uint8(2|8|48), "CustomInputSchema", "NumberInRange", "data.a.b", "", -1.0, int64(5), int64(30), "https://127.0.0.1/x?code=1", "X-D", "data.a", "/", "", "", false)
	f.Add(uint8(3|64|4), "", "BoolEquals", "data.b", "", 0.0, int64(300), int64(10), "", "", "", "", "", "PT1M", true)
	f.Add(uint8(0), "", "StringIn", "data.\"x", "\xed\xa0\x80", 0.0, int64(0), int64(0), "http://localhost:1", "aeg-x", "\r\n", "\xff", "a,,b", "PT0.5S", false)
	f.Add(uint8(2|128), "", "NumberInRange", "data.a", "", 1e308, int64(-5), int64(1441), "https://[::1]:99999/", "X-\u00ff", "", "", "", "-P1D", false)
	_, api := newFuzzAPI(f)
	topics := []string{`{}`, `{"properties":{"inputSchema":"CloudEventSchemaV1_0"}}`, `{"properties":{"kind":"namespace"}}`,
		`{"properties":{"inputSchema":"CustomEventSchema","inputSchemaMapping":{"inputSchemaMappingType":"Json","properties":{"id":{"sourceField":"i"},"eventType":{"defaultValue":"t"},"subject":{"defaultValue":"s"},"dataVersion":{"defaultValue":"1"}}}}}`}
	f.Fuzz(func(t *testing.T, shape uint8, schema, op, key, sval string, num float64, n1, n2 int64, endpoint, hname, hval, prefix, types, ttl string, flag bool) {
		q := func(s string) string {
			b, _ := json.Marshal(s)
			return string(b)
		}
		value := q(sval)
		switch shape % 4 {
		case 1:
			b, err := json.Marshal(num)
			if err != nil {
				return // NaN and infinities are not JSON
			}
			value = string(b)
		case 2:
			lo, _ := json.Marshal(num)
			value = "[" + string(lo) + "," + fmt.Sprint(n1) + "]"
		case 3:
			value = fmt.Sprint(flag)
		}
		af := `{"operatorType":` + q(op) + `,"key":` + q(key) + `,"values":[` + value + `]}`
		if shape&64 != 0 {
			af = `{"operatorType":` + q(op) + `,"key":` + q(key) + `,"value":` + value + `}`
		}
		mapping := `{"name":` + q(hname) + `,"type":"Static","properties":{"value":` + q(hval) + `,"isSecret":` + fmt.Sprint(flag) + `}}`
		if shape&8 != 0 {
			mapping = `{"name":` + q(hname) + `,"type":"Dynamic","properties":{"sourceField":` + q(hval) + `}}`
		}
		filter := `"filter":{"subjectBeginsWith":` + q(prefix) + `,"subjectEndsWith":` + q(sval) + `,"includedEventTypes":` + jsonList(types) +
			`,"isSubjectCaseSensitive":` + fmt.Sprint(flag) + `,"enableAdvancedFilteringOnArrays":` + fmt.Sprint(!flag) + `,"advancedFilters":[` + af + `]}`
		var sub string
		topic := topics[int(shape>>4)%len(topics)]
		if shape&4 != 0 {
			sub = `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"receiveLockDurationInSeconds":` + fmt.Sprint(n1) +
				`,"maxDeliveryCount":` + fmt.Sprint(n2) + `,"eventTimeToLive":` + q(ttl) + `}},` + filter + `,"labels":` + jsonList(types) + `}}`
			topic = topics[2]
		} else {
			sub = `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":` + q(endpoint) +
				`,"maxEventsPerBatch":` + fmt.Sprint(n1) + `,"preferredBatchSizeInKilobytes":` + fmt.Sprint(n2) +
				`,"deliveryAttributeMappings":[` + mapping + `]}},` + filter +
				`,"retryPolicy":{"maxDeliveryAttempts":` + fmt.Sprint(n2) + `,"eventTimeToLiveInMinutes":` + fmt.Sprint(n1) + `,"profile":` + q(ttl) + `}` +
				`,"eventDeliverySchema":` + q(schema) + `,"labels":` + jsonList(types) + `}}`
			if shape&128 != 0 {
				sub = sub[:len(sub)-2] + `,"deadLetterDestination":{"endpointType":"StorageBlob","properties":{"blobContainerName":` + q(hval) + `}}}}`
			}
		}
		putDefinitions(t, api, []byte(topic), []byte(sub))
	})
}

// jsonList is the JSON array of the comma-separated parts of s ([] for "").
func jsonList(s string) string {
	if s == "" {
		return "[]"
	}
	b, _ := json.Marshal(strings.Split(s, ","))
	return string(b)
}

// roundTrip checks that the definition put answered is what a GET reads, and that PUT again as
// read it is accepted and changes nothing.
func roundTrip(t *testing.T, api http.Handler, what, path string, put *httptest.ResponseRecorder) {
	t.Helper()
	want := properties(t, "PUT "+what, put.Body.Bytes())
	get := fuzzDo(api, http.MethodGet, path, nil, nil)
	if get.Code != http.StatusOK {
		t.Fatalf("GET %s after its PUT answered %d: %d %.500s", what, put.Code, get.Code, get.Body.Bytes())
	}
	got := properties(t, "GET "+what, get.Body.Bytes())
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GET %s reads other properties than its PUT answered:\nPUT %s\nGET %s", what, put.Body.Bytes(), get.Body.Bytes())
	}
	again := fuzzDo(api, http.MethodPut, path, nil, get.Body.Bytes())
	if again.Code != http.StatusOK {
		t.Fatalf("PUT %s again as read: %d %.1000s\nread: %s", what, again.Code, again.Body.Bytes(), get.Body.Bytes())
	}
	if got2 := properties(t, "PUT "+what+" again", again.Body.Bytes()); !reflect.DeepEqual(got2, want) {
		t.Fatalf("PUT %s again as read changed it:\nbefore %s\nafter  %s", what, put.Body.Bytes(), again.Body.Bytes())
	}
}

// FuzzPullRequests sends fuzzed query strings and bodies to the pull routes of a queue event
// subscription (and to the validationUrl route, which reads its query too). Every answer is
// checked (checkAnswer); a settle answered 200 accounts for every token sent, in order, each
// either succeeded or failed with a code and a message; a receive answered 200 has its value
// array. Receives answer at once (EndPolls), so no poll waits.
func FuzzPullRequests(f *testing.F) {
	for _, s := range []struct {
		op          uint8
		query, body string
	}{
		{0, "maxEvents=10&maxWaitTime=10", ""},
		{0, "maxEvents=0&maxWaitTime=%ff", "x"},
		{1, "api-version=2024-06-01", `{"lockTokens":["AZoDXR0yVDI2AAAAAAAAAAJoKNSBavG6IhBcmtE"]}`},
		{2, "releaseDelayInSeconds=3600", `{"lockTokens":["a","a"]}`},
		{2, "releaseDelayInSeconds=%00&releaseDelayInSeconds=10", `{"lockTokens":["a"]}`},
		{3, "", `{"lockTokens":[null,""]}`},
		{4, "", `{"lockTokens":["\ud800"],"LockTokens":["b"]}`},
		{5, "id=1&token=%zz", ""},
		{1, "", "{\"lockTokens\":[\"\xff\"]}{}"},
		{1, "", "{\"lockTokens\":[\"a\xffb\"]}"},
		{0, "maxEvents=1&maxWaitTime=10&maxEvents=1", ""},
		{2, "releaseDelayInSeconds=0&releaseDelayInSeconds=10", `{"lockTokens":["a"]}`},
	} {
		f.Add(s.op, s.query, []byte(s.body))
	}
	r, api := newFuzzAPI(f)
	api.EndPolls()
	ctx := context.Background()
	spec, err := r.CreateTopic(ctx, "nsq", router.TopicSpec{Kind: router.KindNamespace})
	if err != nil {
		f.Fatal(err)
	}
	queue := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}}
	if err := r.CreateSubscription(ctx, "nsq", "que", queue); err != nil {
		f.Fatal(err)
	}
	ops := []string{"receive", "acknowledge", "release", "reject", "renewLock"}
	// The parameters each operation reads: one given twice is never answered 200.
	reads := map[string][]string{"receive": {"maxEvents", "maxWaitTime"}, "release": {"releaseDelayInSeconds"}}
	f.Fuzz(func(t *testing.T, op uint8, query string, body []byte) {
		method, path := http.MethodPost, "/topics/nsq/eventsubscriptions/que"
		if int(op)%(len(ops)+1) == len(ops) {
			method, path = http.MethodGet, "/eventsubscriptions/que/validate"
		} else {
			path += ":" + ops[int(op)%(len(ops)+1)]
		}
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.URL.RawQuery = query
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Aeg-Sas-Key", spec.Key1)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		what := method + " " + path + "?" + query
		if rec.Code >= 300 {
			checkAnswer(t, what, rec, errorBound(len(body)+len(query)))
			return
		}
		checkAnswer(t, what, rec, okBound(len(body)))
		values, _ := url.ParseQuery(query) // as req.URL.Query reads it, errors and all
		for _, name := range reads[path[strings.LastIndexByte(path, ':')+1:]] {
			if len(values[name]) > 1 {
				t.Fatalf("%s: %s is given %d times, and the request was answered %d: %s", what, name, len(values[name]), rec.Code, rec.Body)
			}
		}
		switch {
		case method == http.MethodGet:
			t.Fatalf("%s: an unknown validation URL answered %d: %s", what, rec.Code, rec.Body)
		case strings.HasSuffix(path, ":receive"):
			var res struct {
				Value []json.RawMessage `json:"value"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || res.Value == nil {
				t.Fatalf("%s: a receive answered %s (%v), want {\"value\": [...]}", what, rec.Body, err)
			}
		default:
			var sent struct {
				LockTokens []string `json:"lockTokens"`
			}
			if err := json.Unmarshal(body, &sent); err != nil {
				t.Fatalf("%s: a settle of a body that is not a lock token list (%v) answered 200: %s", what, err, rec.Body)
			}
			var res struct {
				Failed []struct {
					LockToken string `json:"lockToken"`
					Error     struct{ Code, Message string }
				} `json:"failedLockTokens"`
				Succeeded []string `json:"succeededLockTokens"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || res.Failed == nil || res.Succeeded == nil {
				t.Fatalf("%s: a settle answered %s (%v), want both failedLockTokens and succeededLockTokens", what, rec.Body, err)
			}
			if len(res.Succeeded) != 0 {
				t.Fatalf("%s: tokens no receive handed out succeeded: %s", what, rec.Body)
			}
			if len(res.Failed) != len(sent.LockTokens) {
				t.Fatalf("%s: %d tokens sent, %d failed and %d succeeded: %s", what, len(sent.LockTokens), len(res.Failed), len(res.Succeeded), rec.Body)
			}
			// encoding/json reads bytes that are not UTF-8, and half a surrogate pair, as
			// U+FFFD: a body answered 200 has neither, so no token in the answer was altered.
			if !utf8.Valid(body) {
				t.Fatalf("%s: a settle of a body that is not UTF-8 answered 200: %s", what, rec.Body)
			}
			sentFFFD := bytes.ContainsRune(body, utf8.RuneError) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`))
			for i, fl := range res.Failed {
				if strings.ContainsRune(fl.LockToken, utf8.RuneError) && !sentFFFD {
					t.Fatalf("%s: failed token %d is %q, with a U+FFFD the client did not send", what, i, fl.LockToken)
				}
				if fl.LockToken != sent.LockTokens[i] || fl.Error.Code == "" || fl.Error.Message == "" {
					t.Fatalf("%s: failed token %d is %+v, want %q with a code and a message", what, i, fl, sent.LockTokens[i])
				}
			}
		}
	})
}

// FuzzPublishRequests posts fuzzed bodies, query strings, content types and CloudEvents
// headers to the classic and namespace publish routes of a topic of each input schema. Every
// answer is checked (checkAnswer); a publish answered 200 is one the topic's decoder takes
// whole (a binary-mode publish aside, whose body is the data), so nothing refused was
// accepted, and one it refuses is never answered 200.
func FuzzPublishRequests(f *testing.F) {
	for _, s := range []struct {
		route                    uint8
		query, ctype, ceID, body string
	}{
		{0, "api-version=2018-01-01", "application/json", "", `[{"id":"1","subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":{"a":1},"dataVersion":"1"}]`},
		{1, "api-version=2018-01-01", "application/cloudevents-batch+json; charset=utf-8", "", `[{"specversion":"1.0","id":"1","source":"/s","type":"t","data":1}]`},
		{2, "api-version=2023-11-01", "application/cloudevents+json", "", `{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":"AA=="}`},
		{2, "api-version=%ff&api-version=", "text/plain", "1", "hello"},
		{3, "", "application/json", "", `[{"i":"1","more":[1,2,{"x":null}]}]`},
		{0, "", "application/json", "", `[{"id":"\ud800","subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":1,"dataVersion":"1","id":"2"}]`},
		{1, "", "application/cloudevents-batch+json", "", "[{\"specversion\":\"1.0\",\"id\":\"\xff\",\"source\":\"/s\",\"type\":\"t\"}]"},
	} {
		f.Add(s.route, s.query, s.ctype, s.ceID, []byte(s.body))
	}
	r, api := newFuzzAPI(f)
	ctx := context.Background()
	mapping := `{"inputSchema":"CustomEventSchema","inputSchemaMapping":{"inputSchemaMappingType":"Json","properties":{"id":{"sourceField":"i"},"eventType":{"defaultValue":"t"},"subject":{"defaultValue":"s"},"dataVersion":{"defaultValue":"1"}}}}`
	var custom router.TopicSpec
	if err := json.Unmarshal([]byte(mapping), &custom); err != nil {
		f.Fatal(err)
	}
	topics := []struct {
		name string
		spec router.TopicSpec
	}{
		{"egrid-topic", router.TopicSpec{}},
		{"ce-topic", router.TopicSpec{InputSchema: "CloudEventSchemaV1_0"}},
		{"ns-topic", router.TopicSpec{Kind: router.KindNamespace}},
		{"custom-topic", custom},
	}
	keys := make([]string, len(topics))
	for i, tp := range topics {
		spec, err := r.CreateTopic(ctx, tp.name, tp.spec)
		if err != nil {
			f.Fatal(err)
		}
		topics[i].spec, keys[i] = spec, spec.Key1
	}
	f.Fuzz(func(t *testing.T, route uint8, query, ctype, ceID string, body []byte) {
		i := int(route) % len(topics)
		tp := topics[i]
		path := "/topics/" + tp.name + "/api/events"
		lim := schemas.ClassicLimits
		if tp.spec.Kind == router.KindNamespace {
			path, lim = "/topics/"+tp.name+":publish", schemas.NamespaceLimits
		}
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.URL.RawQuery = query
		req.Header.Set("Aeg-Sas-Key", keys[i])
		if ctype != "" && !strings.ContainsAny(ctype, "\r\n\x00") {
			req.Header.Set("Content-Type", ctype)
		}
		binary := ceID != ""
		if binary && !strings.ContainsAny(ceID, "\r\n\x00") {
			req.Header.Set("Ce-Specversion", "1.0")
			req.Header.Set("Ce-Id", ceID)
			req.Header.Set("Ce-Source", "/s")
			req.Header.Set("Ce-Type", "t")
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		what := "POST " + path + "?" + query
		if rec.Code >= 300 {
			checkAnswer(t, what, rec, errorBound(len(body)+len(query)+len(ctype)+len(ceID)))
			return
		}
		checkAnswer(t, what, rec, 1<<10)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: answered %d: %s", what, rec.Code, rec.Body)
		}
		if binary {
			return
		}
		if _, err := r.DecodeEvents(tp.name, tp.spec, body, lim); err != nil {
			t.Fatalf("%s: answered 200 to a body its topic's decoder refuses (%v): %q", what, err, body)
		}
	})
}
