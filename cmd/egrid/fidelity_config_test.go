package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// The server section sets the Azure subscription id and resource group of topic IDs (so an
// event's topic matches the user's Azure topic ID) and the Retry-After extension, and
// `egrid validate` reports bad values.
func TestServerSectionFidelitySettings(t *testing.T) {
	write := func(yaml string) string {
		path := filepath.Join(t.TempDir(), "egrid.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	file, err := loadConfig(write("server:\n  azureSubscriptionId: 5f0c1a52-8a3d-4f7e-9d51-0c6a8f7b2e10\n  resourceGroup: rg-prod\n  honorRetryAfter: true\n  history:\n    attempts: 20\n    retention: 48h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := file.validate(); err != nil {
		t.Fatal(err)
	}
	var s serveSettings
	app := &cli.App{Flags: serveCommand(env{}).Flags, Action: func(c *cli.Context) (err error) {
		s, err = resolveSettings(c, func(string) string { return "" }, file)
		return err
	}}
	if err := app.Run([]string{"egrid"}); err != nil {
		t.Fatal(err)
	}
	cfg := s.routerConfig()
	if cfg.AzureSubscriptionID != "5f0c1a52-8a3d-4f7e-9d51-0c6a8f7b2e10" || cfg.ResourceGroup != "rg-prod" || !cfg.HonorRetryAfter {
		t.Errorf("router config %+v; want the server section's azureSubscriptionId, resourceGroup and honorRetryAfter", cfg)
	}
	if cfg.History.Attempts != 20 || cfg.History.Retention != 48*time.Hour {
		t.Errorf("router config history %+v; want the server section's 20 attempts kept for 48h", cfg.History)
	}

	bad, err := loadConfig(write("server:\n  azureSubscriptionId: not-a-guid\n  resourceGroup: \"ends.\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = bad.validate()
	if err == nil || !strings.Contains(err.Error(), "azureSubscriptionId") || !strings.Contains(err.Error(), "resourceGroup") {
		t.Errorf("validate: %v; want both bad values reported", err)
	}
}
