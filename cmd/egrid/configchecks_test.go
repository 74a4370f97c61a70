package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestValidateRefusesTheRouterSettingsServeRefuses: `egrid validate` called these valid, and
// serve then opened its store and exited with "invalid router config: maxSubscriptionsPerTopic
// -5 ...", naming no config key. Both now refuse the file with router.New's own checks, each
// value named by its key, with its range.
func TestValidateRefusesTheRouterSettingsServeRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "egrid.yaml")
	cfg := "server:\n  maxInFlight: -1\n  maxSubscriptionsPerTopic: -5\n  history: {attempts: -1, retention: -1h}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"server.maxInFlight -1 is invalid: use a positive number (0 for the default, 16)",
		"server.maxSubscriptionsPerTopic -5 is invalid: use a positive number (0 for the default, 500)",
		"server.history.attempts -1 is invalid: use 1 to 1000 (0 for the default, 10)",
		"server.history.retention -1h0m0s is invalid: use a positive duration such as 24h (0 for the default)",
	}
	for _, args := range [][]string{
		{"validate", "--config", path},
		{"serve", "--config", path, "--insecure-dev", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")},
	} {
		code, out := cliRun(t, args...)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s", args[0], code, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output does not say %q:\n%s", args[0], w, out)
			}
		}
		if strings.Contains(out, "invalid router config") {
			t.Errorf("%s: the file's settings were refused by the router, not by the file's checks:\n%s", args[0], out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("serve opened its store before it refused the config")
	}
}

// TestValidateDeclaresUnderTheFilesSubscriptionLimit: validate built the declared resources
// under the default limits, so a topic declaring more event subscriptions than the file's
// server.maxSubscriptionsPerTopic was valid and failed at start.
func TestValidateDeclaresUnderTheFilesSubscriptionLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egrid.yaml")
	cfg := `server:
  maxSubscriptionsPerTopic: 1
topics:
  - name: orders
    eventSubscriptions:
      - {name: billing, properties: {destination: {endpointType: GoChannel, properties: {topic: billing}}}}
      - {name: audit, properties: {destination: {endpointType: GoChannel, properties: {topic: audit}}}}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := cliRun(t, "validate", "--config", path)
	if code != 2 || !strings.Contains(out, "maxSubscriptionsPerTopic") {
		t.Fatalf("validate: exit %d, want 2 naming maxSubscriptionsPerTopic\n%s", code, out)
	}
}

// TestConfigWithASecondDocumentIsRefused: a second YAML document (after ---) was read by
// nothing, so validate called the file valid and serve started without its settings and
// topics. It is refused, naming the line where it starts; empty documents are no loss.
func TestConfigWithASecondDocumentIsRefused(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"a second document", "server:\n  listen: 127.0.0.1:9090\n---\ntopics:\n  - name: orders\n", "line 3: a second YAML document starts here"},
		{"after an end marker", "server: {}\n...\n---\ntopics: []\n", "line 3: a second YAML document starts here"},
		{"after an empty one", "---\n---\n# the topics\ntopics: []\n", "line 2: a second YAML document starts here"},
		{"a broken second document", "server: {}\n---\ntopics: [\n", "did not find expected node content"},
		{"a leading ---", "---\nserver: {}\n", ""},
		{"a trailing ---", "server: {}\n---\n", ""},
		{"a trailing --- and a comment", "server: {}\n---\n# nothing\n", ""},
	} {
		_, err := decodeConfig([]byte(c.yaml), func(string) string { return "" })
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v\nwant %q", c.name, err, c.want)
		}
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "egrid.yaml")
	if err := os.WriteFile(path, []byte("server: {}\n---\ntopics:\n  - name: orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// serve runs under a cancelled context: a serve that took the file stops at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{
		{"validate", "--config", path},
		{"serve", "--config", path, "--insecure-dev", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")},
	} {
		var out bytes.Buffer
		code := run(ctx, append([]string{"egrid"}, args...), env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }})
		if code != 2 || !strings.Contains(out.String(), "line 2: a second YAML document") {
			t.Errorf("%s: exit %d, want 2 naming the second document\n%s", args[0], code, out.String())
		}
	}
}

// TestConfigErrorsNameThePathAndLine: the decoder named Go types ("field bogus not found in
// type router.RetryPolicy", "cannot unmarshal !!str `ten` into int") and stopped at the
// first time that did not parse; every problem is now named by its path in the config and its
// line, with what the key takes, in the admin API's words.
func TestConfigErrorsNameThePathAndLine(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"an unknown member of a retry policy", `topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          retryPolicy: {maxDeliveryAttempts: 10, bogus: 3}
`, []string{`line 6: "topics[0].eventSubscriptions[0].properties.retryPolicy.bogus" is not a member of topics[0].eventSubscriptions[0].properties.retryPolicy: check its spelling (topics[0].eventSubscriptions[0].properties.retryPolicy takes maxDeliveryAttempts, eventTimeToLiveInMinutes, profile and honorRetryAfter)`}},
		{"a word for a number", "server:\n  maxInFlight: ten\n", []string{`line 2: server.maxInFlight: is a string; give a whole number`}},
		{"a reference for a number", "server:\n  maxInFlight: ${N}\n", []string{`line 2: server.maxInFlight: is a ${...} reference, which expands to a string; write a whole number here`}},
		{"a reference as a key", "${BBK}: x\n", []string{`line 1: "${BBK}" is not a member of the config: check its spelling (the config takes server, topics and sources); ${...} references expand in values, not in keys`}},
		{"an inlined key's neighbour", "server:\n  publishWait: 1s\n  publishWiat: 2s\n", []string{`line 3: "server.publishWiat" is not a member of server: check its spelling (server takes listen, `, "publishWait"}},
		{"every problem at once", `server:
  deadLetterDelay: soon
  history: {attempts: [1], retention: 1h}
  egress: {allow: 10.0.0.0/8}
topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: "https://x.example", maxEventsPerBatch: many}}
          expirationTimeUtc: tomorrow
          labels: {a: b}
`, []string{
			`line 2: server.deadLetterDelay: does not parse as a duration such as 30s, 5m or 1h`,
			`line 3: server.history.attempts: is a list; give a whole number`,
			`line 4: server.egress.allow: is a string; give a list`,
			`line 10: topics[0].eventSubscriptions[0].properties.destination.properties.maxEventsPerBatch: is a string; give a whole number`,
			`line 11: topics[0].eventSubscriptions[0].properties.expirationTimeUtc: does not parse as a date and time in RFC 3339 form`,
			`line 12: topics[0].eventSubscriptions[0].properties.labels: is a mapping; give a list`,
		}},
		{"a merged mapping", "base: &b {maxDeliveryAttempts: 3, bogus: 1}\n", []string{`"base" is not a member of the config`}},
		{"a key given twice", "server:\n  listen: a\n  listen: b\n", []string{`line 3: mapping key "listen" already defined at line 2`}},
	} {
		_, err := decodeConfig([]byte(c.yaml), func(string) string { return "5" })
		if err == nil {
			t.Errorf("%s: decoded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s:\n%v\nwant %q", c.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "not found in type") || strings.Contains(err.Error(), "cannot unmarshal") || strings.Contains(err.Error(), "parsing time") {
			t.Errorf("%s: the error names Go types:\n%v", c.name, err)
		}
	}
}

// TestConfigErrorsNeverRepeatValues: a type error quoted the whole value ("is
// \"amqp://egrid:Sup3rS3cretPassw0rd@rabbit.internal:5672/\"; give a mapping of url"), so a
// password in a misplaced URL landed in CI logs. A value is now named by its YAML kind only,
// and an URL's user information is scrubbed from whatever else a message repeats.
func TestConfigErrorsNeverRepeatValues(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"an URL for a mapping", "server:\n  brokers:\n    rabbitmq: amqp://egrid:Sup3rS3cretPassw0rd@rabbit.internal:5672/\n",
			`line 3: server.brokers.rabbitmq: is a string; give a mapping of url`},
		{"a token for a number", "server:\n  maxInFlight: tok_Sup3rS3cretPassw0rd\n",
			`line 2: server.maxInFlight: is a string; give a whole number`},
		{"an URL as a key", "server:\n  brokers:\n    rabbitmq:\n      \"amqp://egrid:Sup3rS3cretPassw0rd@rabbit.internal/\": x\n",
			`"server.brokers.rabbitmq.amqp://***@rabbit.internal/" is not a member`},
	} {
		_, err := decodeConfig([]byte(c.yaml), func(string) string { return "" })
		if err == nil {
			t.Errorf("%s: decoded", c.name)
			continue
		}
		if strings.Contains(err.Error(), "Sup3rS3cret") {
			t.Errorf("%s: the error repeats the secret:\n%v", c.name, err)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n%v\nwant %q", c.name, err, c.want)
		}
	}
}

// TestConfigProblemsFindNoneInValidConfigs: the walk that names the decoder's problems takes
// what the decoder takes: README's examples, merge keys and anchors.
func TestConfigProblemsFindNoneInValidConfigs(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := []string{`x-retry: &retry {maxDeliveryAttempts: 3}
topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          retryPolicy: {<<: *retry, eventTimeToLiveInMinutes: 5}
          expirationTimeUtc: 2030-01-01T00:00:00Z
          labels: [a, b]
server:
  deadLetterDelay: 5m
  publishWait: 2s
  history: {attempts: 5, retention: 1h}
`}
	for _, m := range yamlBlock.FindAllSubmatch(b, -1) {
		examples = append(examples, string(m[1]))
	}
	for _, ex := range examples {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(ex), &doc); err != nil {
			t.Fatal(err)
		}
		problems := configProblems(&doc, reflect.TypeFor[fileConfig]())
		if strings.HasPrefix(ex, "x-retry") {
			// x-retry is not a key of the config: the one problem.
			if len(problems) != 1 || !strings.Contains(problems[0].Error(), `"x-retry" is not a member`) {
				t.Errorf("problems %v, want x-retry's alone", problems)
			}
			continue
		}
		if len(problems) > 0 {
			t.Errorf("problems in a valid config: %v\n%s", problems, ex)
		}
	}
}

// TestConfigProblemsAreBounded: a mistake copied into every subscription of a large config is
// told maxConfigProblems times and counted, not repeated for each.
func TestConfigProblemsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("topics:\n  - name: orders\n    eventSubscriptions:\n")
	for i := range maxConfigProblems + 7 {
		fmt.Fprintf(&b, "      - {name: sub-%d, properties: {retryPolicy: {bogus: 1}}}\n", i)
	}
	_, err := decodeConfig([]byte(b.String()), func(string) string { return "" })
	if err == nil {
		t.Fatal("decoded")
	}
	if n := strings.Count(err.Error(), "is not a member of"); n != maxConfigProblems || !strings.HasSuffix(err.Error(), "and 7 more problems") {
		t.Errorf("%d problems told, want %d and a count of 7 more:\n%s", n, maxConfigProblems, err)
	}
}

// FuzzDecodeConfig: whatever the file holds, decoding it ends with a config or an error, and
// an error names no Go type of egrid's.
func FuzzDecodeConfig(f *testing.F) {
	for _, seed := range []string{
		"server:\n  maxInFlight: ten\n",
		"topics:\n  - name: orders\n    eventSubscriptions:\n      - {name: billing, properties: {retryPolicy: {bogus: 1}}}\n",
		"a: &a {b: *a}\n",
		"server: {<<: [{listen: x}, {bogus: 1}]}\n",
		"server: {brokers: {postgres: {dsn: x?y}}}\n",
		"server: {}\n---\ntopics: []\n",
		"topics: [{properties: {expirationTimeUtc: 1}}]\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := decodeConfig([]byte(s), func(string) string { return "" })
		if err != nil && (strings.Contains(err.Error(), "main.") || strings.Contains(err.Error(), "router.")) {
			t.Errorf("the error names a Go type:\n%v", err)
		}
	})
}

// TestConfigAliasesThatExpandTooFarAreRefused: the walk that names a config's problems
// followed aliases with no bound, so a 3.6 KB file whose aliases refer to lists of aliases (a
// "billion laughs") kept `egrid validate` busy for seconds along 15 million nodes. The walk now
// stops where the YAML decoder stops, and says so first; a file that merely shares a setting
// among many subscriptions is read as before.
func TestConfigAliasesThatExpandTooFarAreRefused(t *testing.T) {
	const n = 250
	var b strings.Builder
	b.WriteString("topics:\n- &s0 {name: aaa, eventSubscriptions: [&e {name: sss, properties: {labels: [&l lol")
	b.WriteString(strings.Repeat(", *l", n) + "]}}" + strings.Repeat(", *e", n) + "], bogus: 1}\n")
	b.WriteString(strings.Repeat("- *s0\n", n))
	_, err := decodeConfig([]byte(b.String()), func(string) string { return "" })
	if err == nil || !strings.HasPrefix(err.Error(), "the config's aliases (*name) expand it too far to be read: ") {
		t.Errorf("a billion laughs: %.300v\nwant it refused as expanding too far", err)
	}

	// Settings shared by alias among many subscriptions, and one mistake that has the walk
	// read the whole file.
	b.Reset()
	b.WriteString("topics:\n  - name: orders\n    eventSubscriptions:\n")
	for i := range 300 {
		rp, ls := "*rp", "*ls"
		if i == 0 {
			rp, ls = "&rp {maxDeliveryAttempts: 5, eventTimeToLiveInMinutes: 60}", "&ls [a, b, c]"
		}
		fmt.Fprintf(&b, "      - {name: sub-%d, properties: {destination: {endpointType: GoChannel, properties: {topic: t%d}}, retryPolicy: %s, labels: %s}}\n", i, i, rp, ls)
	}
	b.WriteString("      - {name: last, bogus: 1}\n")
	_, err = decodeConfig([]byte(b.String()), func(string) string { return "" })
	if err == nil || strings.Contains(err.Error(), "too far") || !strings.Contains(err.Error(), `"topics[0].eventSubscriptions[300].bogus" is not a member`) {
		t.Errorf("a file sharing settings by alias: %.300v\nwant only its unknown key refused", err)
	}
}
