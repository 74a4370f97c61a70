package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
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
	const topicPath = "/admin/topics/fuzz-topic"
	const subPath = topicPath + "/eventSubscriptions/fuzz-sub"
	f.Fuzz(func(t *testing.T, topicBody, subBody []byte) {
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
	})
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
