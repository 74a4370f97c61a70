package main

import (
	"strings"
	"testing"
)

// TestConfigNamesDeclaredTwiceInAnotherCase: names of topics and event subscriptions ignore
// case, so a config declaring "orders" and "Orders" (or "billing" and "Billing" under one
// topic) declares the same one twice, and validate says so. It passed: serve applied both,
// the second silently replacing the first's keys and definition.
func TestConfigNamesDeclaredTwiceInAnotherCase(t *testing.T) {
	cfg := writeConfig(t, `
topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: "https://example.com/a", skipValidation: true}}
      - name: Billing
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: "https://example.com/b", skipValidation: true}}
  - name: Orders
`)
	code, out := cliRun(t, "validate", "--config", cfg)
	if code == 0 {
		t.Fatalf("validate of a config declaring names twice in another case: exit 0\n%s", out)
	}
	for _, want := range []string{`topics[1]: topic "Orders" is declared twice`, `topics[0].eventSubscriptions[1]: "Billing" is declared twice`} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
}
