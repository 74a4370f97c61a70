package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// answerHandshake answers the endpoint validation handshakes of SPEC §2.5 the way Event Grid
// handlers do — the SubscriptionValidation event with its code, the CloudEvents OPTIONS request
// with consent — and reports whether r was one.
func answerHandshake(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.Method == http.MethodOptions:
		w.Header().Set("WebHook-Allowed-Origin", r.Header.Get("WebHook-Request-Origin"))
		w.WriteHeader(http.StatusOK)
		return true
	case r.Header.Get("aeg-event-type") == "SubscriptionValidation":
		var evs []struct {
			Data struct {
				ValidationCode string `json:"validationCode"`
			} `json:"data"`
		}
		_ = json.NewDecoder(r.Body).Decode(&evs)
		if len(evs) == 1 {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": evs[0].Data.ValidationCode})
		}
		return true
	}
	return false
}

func TestJoinFlagWords(t *testing.T) {
	sep := wordSep
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "az words", args: []string{"egrid", "event-subscription", "create", "--included-event-types", "A", "B", "--name", "n"},
			want: []string{"egrid", "event-subscription", "create", "--included-event-types=A" + sep + "B", "--name", "n"}},
		{name: "negative number is a value", args: []string{"--advanced-filter", "data.n", "NumberGreaterThan", "-5", "--labels", "x"},
			want: []string{"--advanced-filter=data.n" + sep + "NumberGreaterThan" + sep + "-5", "--labels=x"}},
		{name: "one quoted string stays one word", args: []string{"--advanced-filter", "data.n NumberIn 1 2"},
			want: []string{"--advanced-filter=data.n NumberIn 1 2"}},
		{name: "value with spaces kept whole", args: []string{"--delivery-attribute-mapping", "Authorization", "static", "Bearer abc", "true"},
			want: []string{"--delivery-attribute-mapping=Authorization" + sep + "static" + sep + "Bearer abc" + sep + "true"}},
		{name: "bool word", args: []string{"--subject-case-sensitive", "true", "--skip-validation", "--name", "n"},
			want: []string{"--subject-case-sensitive=true", "--skip-validation", "--name", "n"}},
		{name: "missing value left to cli", args: []string{"--labels", "--name", "n"}, want: []string{"--labels", "--name", "n"}},
		{name: "after --", args: []string{"--", "--labels", "a"}, want: []string{"--", "--labels", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := joinFlagWords(tt.args); !slices.Equal(got, tt.want) {
				t.Errorf("joinFlagWords(%q) = %q; want %q", tt.args, got, tt.want)
			}
		})
	}
}

// TestSubscriptionFlagsBuildTheARMBody checks the ARM body create sends for every az flag,
// against a server that only records it.
func TestSubscriptionFlagsBuildTheARMBody(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &got)
		_, _ = w.Write([]byte(`{"name":"billing","properties":{}}`))
	}))
	defer srv.Close()
	code, out := cliRun(t, "event-subscription", "create", "--server", srv.URL, "--topic", "orders", "--name", "billing",
		"--endpoint", "https://example.com/hook?code=k", "--endpoint-type", "WebHook",
		"--included-event-types", "Order.Created", "Order.Shipped",
		"--subject-begins-with", "/orders/", "--subject-ends-with", ".json", "--subject-case-sensitive", "true",
		"--advanced-filter", "data.n", "NumberGreaterThan", "-5",
		"--advanced-filter", "data.region StringIn eu us",
		"--advanced-filter", "data.size", "NumberInRange", "1,10", "20,30",
		"--advanced-filter", "data.ok", "BoolEquals", "true",
		"--advanced-filter", "data.x", "IsNotNull",
		"--enable-advanced-filtering-on-arrays",
		"--max-delivery-attempts", "10", "--event-ttl", "60",
		"--max-events-per-batch", "50", "--preferred-batch-size-in-kilobytes", "128",
		"--deadletter-container", "dead-letters",
		"--delivery-attribute-mapping", "Authorization", "static", "Bearer abc", "true",
		"--delivery-attribute-mapping", "X-Tenant dynamic data.tenant",
		"--delivery-attribute-mapping", "X-Plain", "static", "v",
		"--event-delivery-schema", "CloudEventSchemaV1_0",
		"--expiration-date", "2030-01-31",
		"--labels", "prod", "billing",
		"--retry-profile", "eventgrid-2019", "--skip-validation")
	if code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	want := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://example.com/hook?code=k","maxEventsPerBatch":50,"preferredBatchSizeInKilobytes":128,` +
		`"deliveryAttributeMappings":[{"name":"Authorization","type":"Static","properties":{"value":"Bearer abc","isSecret":true}},{"name":"X-Tenant","type":"Dynamic","properties":{"sourceField":"data.tenant"}},{"name":"X-Plain","type":"Static","properties":{"value":"v"}}],"skipValidation":true}},` +
		`"filter":{"includedEventTypes":["Order.Created","Order.Shipped"],"subjectBeginsWith":"/orders/","subjectEndsWith":".json","isSubjectCaseSensitive":true,"enableAdvancedFilteringOnArrays":true,` +
		`"advancedFilters":[{"operatorType":"NumberGreaterThan","key":"data.n","value":-5},{"operatorType":"StringIn","key":"data.region","values":["eu","us"]},` +
		`{"operatorType":"NumberInRange","key":"data.size","values":[[1,10],[20,30]]},{"operatorType":"BoolEquals","key":"data.ok","value":true},{"operatorType":"IsNotNull","key":"data.x"}]},` +
		`"retryPolicy":{"maxDeliveryAttempts":10,"eventTimeToLiveInMinutes":60,"profile":"eventgrid-2019"},` +
		`"deadLetterDestination":{"endpointType":"StorageBlob","properties":{"blobContainerName":"dead-letters"}},"eventDeliverySchema":"CloudEventSchemaV1_0","labels":["prod","billing"],"expirationTimeUtc":"2030-01-31T00:00:00Z"}}`
	var w map[string]any
	_ = json.Unmarshal([]byte(want), &w)
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		t.Errorf("PUT body\n%s\nwant\n%s", g, want)
	}

	for _, bad := range [][]string{
		{"--advanced-filter", "data.n"},
		{"--advanced-filter", "data.n", "NumberWithin", "5"},
		{"--advanced-filter", "data.n", "NumberInRange", "5"},
		{"--delivery-attribute-mapping", "X-A", "computed", "v"},
		{"--expiration-date", "next week"},
	} {
		args := append([]string{"event-subscription", "create", "--server", srv.URL, "--topic", "orders", "--name", "billing", "--endpoint", "https://example.com/"}, bad...)
		if code, out := cliRun(t, args...); code != 2 || !strings.Contains(out, bad[0]) {
			t.Errorf("create %q: %d %s; want exit 2 naming %s", bad, code, out, bad[0])
		}
	}
	if code, out := cliRun(t, "event-subscription", "create", "--server", srv.URL, "--topic", "orders", "--name", "billing", "--endpoint", "https://example.com/",
		"--delivery-attribute-mapping", "X-A", "bogus", "hidden-value-123"); code != 2 || strings.Contains(out, "hidden-value-123") {
		t.Errorf("a bad mapping: %d %s; want exit 2 without repeating its value", code, out)
	}
}

func TestSubscriptionHelpReadsLikeAz(t *testing.T) {
	for _, sub := range []string{"create", "update", "show", "list", "delete"} {
		code, out := cliRun(t, "event-subscription", sub, "--help")
		if code != 0 {
			t.Fatalf("%s --help: %d %s", sub, code, out)
		}
		// az: a short imperative sentence, then examples.
		var usage string
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "egrid event-subscription "+sub+" - ") {
				usage = strings.TrimSpace(line[strings.Index(line, " - ")+3:])
			}
		}
		first := strings.Fields(usage + " x")[0]
		if !strings.HasSuffix(usage, ".") || !slices.Contains([]string{"Create", "Update", "Get", "List", "Delete"}, first) {
			t.Errorf("%s usage %q; want a short imperative sentence like az's", sub, usage)
		}
		if !strings.Contains(out, "Examples:") || !strings.Contains(out, "egrid event-subscription "+sub+" --topic") {
			t.Errorf("%s --help has no examples:\n%s", sub, out)
		}
	}
	_, out := cliRun(t, "event-subscription", "create", "--help")
	for _, flag := range []string{"--endpoint", "--endpoint-type", "--included-event-types", "--subject-begins-with", "--subject-ends-with", "--subject-case-sensitive",
		"--advanced-filter", "--max-delivery-attempts", "--event-ttl", "--max-events-per-batch", "--preferred-batch-size-in-kilobytes", "--deadletter-container",
		"--delivery-attribute-mapping", "--event-delivery-schema", "--expiration-date", "--labels"} {
		if !strings.Contains(out, flag+" ") {
			t.Errorf("create --help does not list %s", flag)
		}
	}
	if !strings.Contains(out, "one quoted string split on spaces") {
		t.Errorf("create --help does not explain multi-word flags:\n%s", out)
	}
}

// hookWith is an endpoint like newEndpoint whose deliveries are answered with status.
func hookWith(t *testing.T, status int) *endpoint {
	e := &endpoint{got: make(chan delivery, 1000)}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerHandshake(w, r) {
			return
		}
		body, _ := io.ReadAll(r.Body)
		e.got <- delivery{header: r.Header.Clone(), body: body}
		w.WriteHeader(status)
	}))
	t.Cleanup(e.Close)
	return e
}

func publishCLI(t *testing.T, server, topic, id, subject string, data string) {
	t.Helper()
	ev := fmt.Sprintf(`{"id":%q,"subject":%q,"eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1","data":%s}`, id, subject, data)
	if code, out := cliRun(t, "publish", server, "--topic", topic, "--data", ev); code != 0 {
		t.Fatalf("publish %s: %d %s", id, code, out)
	}
}

func ids(t *testing.T, d delivery) []string {
	t.Helper()
	var evs []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(d.body, &evs); err != nil {
		t.Fatalf("delivery %s: %v", d.body, err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

// TestEventSubscriptionCLI creates, shows, updates and deletes an event subscription with the
// CLI against the real binary, and checks that deliveries follow each change.
func TestEventSubscriptionCLI(t *testing.T) {
	dir := t.TempDir()
	hook, hook2 := newEndpoint(t), newEndpoint(t)
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(dir, "data"))
	server := "--server=" + srv.url
	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "billing",
		"--endpoint", hook.URL+"/hook?code=q-secret",
		"--included-event-types", "Order.Created", "Order.Updated",
		"--subject-begins-with", "/orders/",
		"--advanced-filter", "data.amount", "NumberGreaterThan", "100",
		"--delivery-attribute-mapping", "X-Api-Key", "static", "h-secret", "true",
		"--delivery-attribute-mapping", "X-Region", "dynamic", "data.region",
		"--labels", "finance", "eu",
		"--expiration-date", time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339))
	if code != 0 || !strings.Contains(out, "billing") || !strings.Contains(out, "Succeeded") {
		t.Fatalf("event-subscription create: %d %s", code, out)
	}
	code, out = cliRun(t, "event-subscription", "show", server, "--topic", "orders", "--name", "billing")
	if code != 0 || !strings.Contains(out, "Succeeded") || !strings.Contains(out, hook.URL+"/hook") || !strings.Contains(out, "backlog=0") {
		t.Errorf("show: %d %s", code, out)
	}
	code, out = cliRun(t, "event-subscription", "show", server, "--topic", "orders", "--name", "billing", "-o", "json")
	var shown armSubscription
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil {
		t.Fatalf("show -o json: %d %s", code, out)
	}
	if p := shown.Properties; len(p.Filter.AdvancedFilters) != 1 || !slices.Equal(p.Labels, []string{"finance", "eu"}) || p.ExpirationTimeUTC.IsZero() ||
		len(p.Destination.Properties.DeliveryAttributeMappings) != 2 || strings.Contains(out, "secret") {
		t.Errorf("show -o json: %s; want the properties without the secrets", out)
	}

	publishCLI(t, server, "orders", "small", "/orders/1", `{"amount":5,"region":"eu"}`)
	publishCLI(t, server, "orders", "big", "/orders/2", `{"amount":500,"region":"us"}`)
	d := hook.await(t, 1)[0]
	if got := ids(t, d); !slices.Equal(got, []string{"big"}) || d.header.Get("X-Api-Key") != "h-secret" || d.header.Get("X-Region") != "us" {
		t.Errorf("delivered %v with X-Api-Key %q X-Region %q; want big with both headers", got, d.header.Get("X-Api-Key"), d.header.Get("X-Region"))
	}

	// update changes only what its flags name.
	code, out = cliRun(t, "event-subscription", "update", server, "--topic", "orders", "--name", "billing",
		"--advanced-filter", "data.amount NumberLessThan 10", "--labels", "finance", "--max-delivery-attempts", "5")
	if code != 0 {
		t.Fatalf("update: %d %s", code, out)
	}
	_, out = cliRun(t, "event-subscription", "show", server, "--topic", "orders", "--name", "billing", "-o", "json")
	shown = armSubscription{}
	_ = json.Unmarshal([]byte(out), &shown)
	if p := shown.Properties; !slices.Equal(p.Labels, []string{"finance"}) || p.RetryPolicy.MaxDeliveryAttempts != 5 || p.Filter.SubjectBeginsWith != "/orders/" ||
		len(p.Filter.IncludedEventTypes) != 2 || p.Destination.Properties.EndpointBaseURL != hook.URL+"/hook" {
		t.Errorf("after update: %s; want labels and attempts changed, the rest kept", out)
	}
	publishCLI(t, server, "orders", "tiny", "/orders/3", `{"amount":1,"region":"eu"}`)
	d = hook.await(t, 1)[0]
	if got := ids(t, d); !slices.Equal(got, []string{"tiny"}) || d.header.Get("X-Api-Key") != "h-secret" {
		t.Errorf("after update delivered %v with X-Api-Key %q; want tiny, the secret header kept", got, d.header.Get("X-Api-Key"))
	}

	// A new endpoint is validated and gets the next events.
	if code, out := cliRun(t, "event-subscription", "update", server, "--topic", "orders", "--name", "billing", "--endpoint", hook2.URL+"/v2"); code != 0 {
		t.Fatalf("update --endpoint: %d %s", code, out)
	}
	publishCLI(t, server, "orders", "moved", "/orders/4", `{"amount":2}`)
	if got := ids(t, hook2.await(t, 1)[0]); !slices.Equal(got, []string{"moved"}) {
		t.Errorf("the new endpoint got %v; want moved", got)
	}

	if code, out := cliRun(t, "event-subscription", "list", server, "--topic", "orders"); code != 0 || !strings.Contains(out, "billing") || !strings.Contains(out, hook2.URL+"/v2") {
		t.Errorf("list: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "delete", server, "--topic", "orders", "--name", "billing"); code != 0 {
		t.Errorf("delete: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "show", server, "--topic", "orders", "--name", "billing"); code == 0 || !strings.Contains(out, "404") {
		t.Errorf("show after delete: %d %s; want 404", code, out)
	}
	srv.stop(t)
}

// TestSecretsNeverLeak creates subscriptions with a secret header value and a secret in the
// endpoint's query string, makes deliveries fail and creates fail, and greps every read, every
// error and the server's debug log for the secrets.
func TestSecretsNeverLeak(t *testing.T) {
	const querySecret, headerSecret = "QUERY-SECRET-31337", "HEADER-SECRET-42"
	dir := t.TempDir()
	failing := hookWith(t, http.StatusInternalServerError)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	defer refusing.Close()
	srv := startServer(t, "--insecure-dev", "--log-level", "debug", "--data-dir", filepath.Join(dir, "data"))
	server := "--server=" + srv.url
	var outputs []string
	run := func(args ...string) (int, string) {
		code, out := cliRun(t, args...)
		outputs = append(outputs, out)
		return code, out
	}
	run("topic", "create", server, "--name", "orders")
	if code, out := run("event-subscription", "create", server, "--topic", "orders", "--name", "billing", "--endpoint", failing.URL+"/hook?code="+querySecret,
		"--delivery-attribute-mapping", "Authorization", "static", "Bearer "+headerSecret, "true"); code != 0 {
		t.Fatalf("create: %d %s", code, out)
	}
	publishCLI(t, server, "orders", "e1", "/s", `{}`)
	if d := failing.await(t, 1)[0]; d.header.Get("Authorization") != "Bearer "+headerSecret {
		t.Fatalf("delivered Authorization %q; want the secret", d.header.Get("Authorization"))
	}
	run("event-subscription", "show", server, "--topic", "orders", "--name", "billing")
	run("event-subscription", "show", server, "--topic", "orders", "--name", "billing", "-o", "json")
	run("event-subscription", "list", server, "--topic", "orders", "-o", "json")
	run("event-subscription", "update", server, "--topic", "orders", "--name", "billing", "--labels", "x", "-o", "json")
	if code, out := run("event-subscription", "create", server, "--topic", "orders", "--name", "refused", "--endpoint", refusing.URL+"/hook?code="+querySecret,
		"--delivery-attribute-mapping", "Authorization", "static", headerSecret, "true"); code == 0 || !strings.Contains(out, "403") {
		t.Errorf("create against a refusing endpoint: %d %s; want a validation error", code, out)
	}
	if code, out := run("event-subscription", "create", server, "--topic", "orders", "--name", "invalid", "--endpoint", "ftp://host/?code="+querySecret,
		"--delivery-attribute-mapping", "aeg-key", "static", headerSecret, "true",
		"--delivery-attribute-mapping", "X-Bad", "static", headerSecret+strings.Repeat("x", 5000)); code == 0 || !strings.Contains(out, "aeg-key") {
		t.Errorf("create with bad mappings: %d %s; want the problems listed", code, out)
	}
	for _, path := range []string{"/admin/topics/orders/eventSubscriptions/billing", "/admin/topics/orders/eventSubscriptions"} {
		resp, err := http.Get(srv.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		outputs = append(outputs, string(body))
	}
	srv.stop(t)
	log := srv.log()
	if !strings.Contains(log, "delivery attempt") || !strings.Contains(log, "event subscription created") {
		t.Fatalf("the debug log lacks the lines this test greps:\n%s", log)
	}
	for _, secret := range []string{querySecret, headerSecret} {
		if strings.Contains(log, secret) {
			t.Errorf("the server log shows %s:\n%s", secret, log)
		}
		for _, out := range outputs {
			if strings.Contains(out, secret) {
				t.Errorf("a CLI output or admin read shows %s:\n%s", secret, out)
			}
		}
	}
}

// TestValidateConfigCallsNoEndpoint checks that `egrid validate` builds the declared
// subscriptions without a validation handshake, and reports every problem.
func TestValidateConfigCallsNoEndpoint(t *testing.T) {
	var calls atomic.Int32
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusForbidden)
	}))
	defer refusing.Close()
	dir := t.TempDir()
	write := func(name, cfg string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.yaml", fmt.Sprintf(`server:
  allowHttpEndpoints: true
  egress: {allow: [127.0.0.1]}
topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          destination:
            endpointType: WebHook
            properties:
              endpointUrl: %s/hook
              deliveryAttributeMappings:
                - {name: X-Api-Key, type: Static, properties: {value: k, isSecret: true}}
                - {name: X-Region, type: Dynamic, properties: {sourceField: data.region}}
          labels: [a, b]
          expirationTimeUtc: 2999-01-01T00:00:00Z
`, refusing.URL))
	if code, out := cliRun(t, "validate", "--config", good); code != 0 || !strings.Contains(out, "is valid") {
		t.Errorf("validate of a good config: %d %s", code, out)
	}
	bad := write("bad.yaml", fmt.Sprintf(`server:
  publicUrl: ftp://nowhere
topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          destination:
            endpointType: WebHook
            properties:
              endpointUrl: %s/hook
              deliveryAttributeMappings:
                - {name: aeg-key, type: Static, properties: {value: k}}
          expirationTimeUtc: 2001-01-01T00:00:00Z
`, refusing.URL))
	code, out := cliRun(t, "validate", "--config", bad)
	for _, want := range []string{"publicUrl", "aeg-key", "expirationTimeUtc"} {
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("validate of a bad config: %d %s; want a problem naming %s", code, out, want)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("validate called the endpoint %d times; want none", n)
	}
}
