package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateRefusesOversizeSubscription checks that `egrid validate` (and so serve, which
// applies the config the same way) refuses a subscription over a size bound, naming the
// property, and accepts one at the bound.
func TestValidateRefusesOversizeSubscription(t *testing.T) {
	dir := t.TempDir()
	config := func(name string, labels int, prefix int) string {
		path := filepath.Join(dir, name)
		cfg := fmt.Sprintf(`server:
  allowHttpEndpoints: true
  egress: {allow: [127.0.0.1]}
topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: "http://127.0.0.1:9/hook"}}
          filter: {subjectBeginsWith: %s}
          labels: [%s]
`, strings.Repeat("p", prefix), strings.TrimSuffix(strings.Repeat("l,", labels), ","))
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if code, out := cliRun(t, "validate", "--config", config("at.yaml", 100, 1024)); code != 0 {
		t.Errorf("validate at the bounds: %d %s", code, out)
	}
	code, out := cliRun(t, "validate", "--config", config("over.yaml", 101, 1025))
	if code == 0 || !strings.Contains(out, "labels: 101 given, at most 100 are allowed") || !strings.Contains(out, "subjectBeginsWith: too long: 1025 characters, at most 1024") {
		t.Errorf("validate over the bounds: %d %s; want it refused naming labels and subjectBeginsWith", code, out)
	}
}
