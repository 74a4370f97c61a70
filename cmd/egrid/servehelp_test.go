package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/httpserver"
)

// statedDefault is how a flag's help states its default: "(default: 1s)", "(default 1s; ...)".
var statedDefault = regexp.MustCompile(`\(default[: ]`)

// TestServeHelpShowsEffectiveDefaults walks every flag of `egrid serve` and compares the
// default its help shows with the one serve uses when neither the flag, its environment
// variable nor the config file sets it: resolveSettings with nothing set, and the defaults the
// packages give zero fields. A flag's help states its default once: the help showed
// "(default 5m; ...) (default: 0s)" for --dead-letter-delay, the 0s reading as "no delay".
func TestServeHelpShowsEffectiveDefaults(t *testing.T) {
	var s serveSettings
	app := &cli.App{Flags: serveCommand(env{}).Flags, Action: func(c *cli.Context) (err error) {
		s, err = resolveSettings(c, func(string) string { return "" }, nil)
		return err
	}}
	if err := app.Run([]string{"egrid"}); err != nil {
		t.Fatal(err)
	}
	h := s.HTTP.WithDefaults()
	cl := s.Cluster.Options.WithDefaults()
	dlDelay := s.DeadLetters.Delay
	if dlDelay == 0 {
		dlDelay = deadletter.DefaultDelay // the router's default of a zero delay
	}
	// upTo: a default that is a bound, lower on machines that cannot hold it.
	upTo := func(bound, effective int, lower string) string {
		if effective > bound {
			return fmt.Sprintf("%d (effective %d, over the bound)", bound, effective)
		}
		return fmt.Sprintf("%d, or %s when lower", bound, lower)
	}
	want := map[string]string{
		"listen":                   s.Listen,
		"data-dir":                 s.DataDir,
		"config":                   "",
		"admin-token":              s.AdminToken,
		"admin-token-file":         "",
		"insecure-dev":             strconv.FormatBool(s.InsecureDev),
		"insecure-dev-any-address": strconv.FormatBool(s.InsecureDevAnyAddress),
		"time-scale":               strconv.FormatFloat(s.TimeScale, 'g', -1, 64),
		"tls-cert":                 s.TLSCert,
		"tls-key":                  s.TLSKey,
		"minio-endpoint":           s.DeadLetters.MinIO.Endpoint,
		"minio-access-key":         s.DeadLetters.MinIO.AccessKey,
		"minio-secret-key":         s.DeadLetters.MinIO.SecretKey,
		"minio-secret-key-file":    "",
		"minio-secure":             strconv.FormatBool(s.DeadLetters.MinIO.Secure),
		"dead-letter-delay":        dlDelay.String(),
		"read-header-timeout":      h.ReadHeaderTimeout.String(),
		"body-timeout":             h.BodyTimeout.String(),
		"idle-timeout":             h.IdleTimeout.String(),
		"max-header-bytes":         strconv.Itoa(h.MaxHeaderBytes),
		"max-connections":          upTo(httpserver.DefaultMaxConnections, h.MaxConnections, "half the open-file limit"),
		"max-publish-bodies":       strconv.Itoa(h.MaxPublishBodies),
		"publish-wait":             h.PublishWait.String(),
		"max-receive-polls":        upTo(httpserver.DefaultMaxReceivePolls, h.MaxReceivePolls, "a quarter of --max-connections"),
		"log-fold-window":          s.LogFoldWindow.String(),
		"secret-key-file":          s.Store.SecretKeyFile,
		"cluster":                  strings.Join(s.Cluster.URLs, ","),
		"cluster-replicas":         strconv.Itoa(s.Cluster.Replicas),
		"cluster-prefix":           cl.Prefix,
		"cluster-lease-ttl":        cl.LeaseTTL.String(),
		"egress-allow":             strings.Join(s.Egress.Policy.Allow, ","),
		"egress-deny":              strings.Join(s.Egress.Policy.Deny, ","),
		"allow-http-endpoints":     strconv.FormatBool(s.Egress.AllowHTTPEndpoints),
		"any-api-version":          strconv.FormatBool(s.AnyAPIVersion),
		"max-receive-answer-bytes": formatBytes(s.MaxReceiveAnswerBytes),
		"log-level":                strings.ToLower(s.Log.Level.String()),
		"log-format":               s.Log.Format,
		"metrics-listen":           s.MetricsListen,
	}
	// Defaults that depend on other settings or on the machine, described in the usage text.
	inUsage := map[string]bool{"public-url": true, "min-free-disk": true, "node-name": true, "log-sync": true}

	for _, f := range serveCommand(env{}).Flags { // fresh flags: Run above set the others
		name := f.Names()[0]
		df, ok := f.(cli.DocGenerationFlag)
		if !ok {
			t.Errorf("--%s: %T has no help text", name, f)
			continue
		}
		shown := df.GetDefaultText()
		if u, err := strconv.Unquote(shown); err == nil {
			shown = u // a string flag's default is shown quoted
		}
		line := f.String()
		if n := len(statedDefault.FindAllString(line, -1)); n > 1 {
			t.Errorf("--%s: the help states a default %d times: %q", name, n, line)
		}
		if inUsage[name] {
			if shown != "" || !strings.Contains(df.GetUsage(), "default") {
				t.Errorf("--%s: help %q; want its default described in the usage text only", name, line)
			}
			continue
		}
		w, ok := want[name]
		switch {
		case !ok:
			t.Errorf("--%s: this test does not know its effective default; add it", name)
		case shown != w:
			t.Errorf("--%s: the help shows default %q, serve uses %q: %q", name, shown, w, line)
		}
	}
	if s.LogFoldWindow != time.Second {
		t.Errorf("log fold window %v, want 1s as the README says", s.LogFoldWindow)
	}
}
