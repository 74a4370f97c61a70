package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// envInUsage is how a serve flag's help names its environment variable: "(env EGRID_LISTEN)",
// "(development only; env EGRID_INSECURE_DEV)".
var envInUsage = regexp.MustCompile(`\benv (EGRID_[A-Z0-9_]+)\)`)

// TestServeFlagsAreInTheREADME compares README's "As a server" table with the flags of
// `egrid serve`: every flag has a row, named with the environment variable its help gives and
// resolveSettings reads, and the table names no flag or variable serve does not have. The table
// lacked --public-url, the --minio-* flags, --dead-letter-delay, --secret-key-file and
// --min-free-disk.
func TestServeFlagsAreInTheREADME(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	table := serveFlagTable(t, string(b))

	// The environment variables resolveSettings reads when no flag is given.
	read := map[string]bool{}
	app := &cli.App{Flags: serveCommand(env{}).Flags, Action: func(c *cli.Context) error {
		_, err := resolveSettings(c, func(name string) string { read[name] = true; return "" }, nil)
		return err
	}}
	if err := app.Run([]string{"egrid"}); err != nil {
		t.Fatal(err)
	}

	flags := map[string]string{} // flag name -> env var, "" for none
	for _, f := range serveCommand(env{}).Flags {
		name := f.Names()[0]
		env := ""
		if m := envInUsage.FindStringSubmatch(f.(cli.DocGenerationFlag).GetUsage()); m != nil {
			env = m[1]
			if !read[env] {
				t.Errorf("--%s: its help names %s, which serve does not read", name, env)
			}
		}
		flags[name] = env
		row, ok := table[name]
		switch {
		case !ok:
			t.Errorf("--%s (%s) has no row in README's `egrid serve` flag table", name, env)
		case row != env:
			t.Errorf("README's `egrid serve` flag table gives --%s the variable %q; serve reads %q", name, row, env)
		}
	}
	for name := range table {
		if _, ok := flags[name]; !ok {
			t.Errorf("README's `egrid serve` flag table has --%s, which serve does not take", name)
		}
	}
}

// serveFlagTable reads the flag table under README's "### As a server": each flag to the
// environment variable its row gives. A row may name several flags and as many variables
// (`--tls-cert`, `--tls-key` | `EGRID_TLS_CERT`, `EGRID_TLS_KEY`).
func serveFlagTable(t *testing.T, readme string) map[string]string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n### As a server\n")
	if !ok {
		t.Fatal(`README has no "### As a server" section`)
	}
	code := regexp.MustCompile("`([^`]*)`")
	table := map[string]string{}
	inTable := false
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`--") {
			continue // the header and its rule
		}
		var names, envs []string
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			name, _, _ := strings.Cut(strings.TrimPrefix(m[1], "--"), " ") // `--time-scale N`
			names = append(names, name)
		}
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			envs = append(envs, m[1])
		}
		if len(envs) != 0 && len(envs) != len(names) {
			t.Errorf("README's `egrid serve` flag table: row %q names %d flags and %d variables", line, len(names), len(envs))
			continue
		}
		for i, name := range names {
			if _, dup := table[name]; dup || slices.Contains(names[:i], name) {
				t.Errorf("README's `egrid serve` flag table has --%s twice", name)
			}
			table[name] = ""
			if len(envs) != 0 {
				table[name] = envs[i]
			}
		}
	}
	if len(table) == 0 {
		t.Fatal(`README's "As a server" section has no flag table`)
	}
	return table
}
