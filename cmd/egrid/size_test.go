package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
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

// TestServeAppliesStoredOversizeConfigAgain starts egrid serve's config application on a
// store holding the config's subscription as an earlier egrid accepted it, over a size bound
// added since: the unchanged definition is applied again, where the restart was refused (exit
// 2) and the server did not start; a changed one is still refused.
func TestServeAppliesStoredOversizeConfigAgain(t *testing.T) {
	ctx := context.Background()
	config := func(suffix string) *fileConfig {
		file, err := decodeConfig([]byte(fmt.Sprintf(`topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: "http://127.0.0.1:9/hook"}}
          filter: {subjectBeginsWith: %s, subjectEndsWith: %q}
          labels: [%s]
`, strings.Repeat("p", 2000), suffix, strings.TrimSuffix(strings.Repeat("l,", 150), ","))), func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return file
	}
	st := store.NewMemory()
	cfg := router.Config{SkipEndpointValidation: true}
	r, err := router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	def, err := json.Marshal(config("").Topics[0].EventSubscriptions[0].Properties)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutSubscription(ctx, "orders", "billing", def); err != nil {
		t.Fatal(err)
	}

	r, err = router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if err := applyDeclared(ctx, r, config(""), nil); err != nil {
		t.Errorf("applying the config unchanged: %v; want it applied, as an earlier egrid accepted it", err)
	}
	if err := applyDeclared(ctx, r, config(".json"), nil); err == nil || !strings.Contains(err.Error(), "labels: 150 given, at most 100") {
		t.Errorf("applying a changed config: %v; want it refused naming labels", err)
	}
}
