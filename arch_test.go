package egrid_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/egridio/egrid"

// allowed lists, for each package (or package prefix ending in "/"), the egrid packages it may
// import directly. The arrows of DESIGN.md §2: pure packages at the bottom, actors above them,
// router above actors, cmd at the top; testkit only in tests and examples.
var allowed = map[string][]string{
	"":                             {},
	"schemas":                      {},
	"schemas/bufpool":              {},
	"schemas/clip":                 {},
	"schemas/member":               {},
	"router/metrics":               {},
	"router/metrics/":              {"router/metrics"},
	"router/probes":                {},
	"router/logattr":               {},
	"router/sas":                   {},
	"router/devguard":              {},
	"router/httpserver":            {"schemas/clip"},
	"router/logfold":               {},
	"router/secretfile":            {},
	"router/filter":                {"schemas"},
	"router/retry":                 {"schemas"},
	"sinks":                        {"schemas"},
	"sinks/":                       {"sinks", "schemas"},
	"router/store":                 {"schemas"},
	"router/cluster":               {"router/internal/bucketkeys", "router/internal/natstoken", "router/logattr"},
	"router/internal/bucketkeys":   {},
	"router/internal/natstoken":    {},
	"router/store/":                {"router/store", "schemas", "router/secretfile", "router/internal/bucketkeys", "router/internal/natstoken", "router/store/internal/wire", "router/logattr"},
	"router/store/internal/wire":   {"router/store", "schemas"},
	"router/internal/natstest":     {"router/store/jetstream"},
	"actors":                       {"schemas", "schemas/bufpool", "router/filter", "router/retry", "router/store", "router/metrics", "router/logattr", "sinks"},
	"actors/deadletter":            {"schemas", "router/retry", "router/store", "router/metrics", "router/logattr", "sinks", "actors"},
	"actors/deadletter/outboxtest": {"schemas", "router/store", "actors", "actors/deadletter"},
	"router":                       {"schemas", "router/filter", "router/retry", "router/store", "router/metrics", "router/metrics/", "router/logattr", "router/probes", "router/sas", "router/cluster", "sinks", "sinks/", "actors", "actors/deadletter"},
	"router/httpapi":               {"schemas", "schemas/bufpool", "schemas/member", "router", "router/sas", "router/logattr", "router/devguard", "router/httpserver"},
	"router/console":               {"router", "router/metrics", "router/devguard"},
	"cmd/":                         {"schemas", "schemas/bufpool", "schemas/member", "router", "router/", "sinks", "sinks/", "actors", "cmd/egrid/internal/"},
	"testkit":                      {"schemas", "router", "router/", "sinks", "sinks/", "actors"},
	"testkit/":                     {"schemas", "router", "router/", "sinks", "sinks/", "actors", "testkit"},
	"examples/":                    {"schemas", "router", "router/httpapi", "router/metrics", "sinks", "sinks/"},
}

func rule(pkg string) ([]string, bool) {
	if r, ok := allowed[pkg]; ok {
		return r, true
	}
	best := ""
	for k := range allowed {
		if strings.HasSuffix(k, "/") && strings.HasPrefix(pkg, k) && len(k) > len(best) {
			best = k
		}
	}
	r, ok := allowed[best]
	return r, ok && best != ""
}

// everywhere lists the leaf packages any package may import: they import only the standard
// library, so no arrow can turn back through them. schemas/clip shortens untrusted values
// quoted in messages, which every layer writes.
var everywhere = []string{"schemas/clip"}

func permitted(imp string, rules []string) bool {
	if slices.Contains(everywhere, imp) {
		return true
	}
	for _, r := range rules {
		if imp == r || strings.HasSuffix(r, "/") && strings.HasPrefix(imp, r) {
			return true
		}
	}
	return false
}

// TestImportArrows fails when a package imports against DESIGN.md §2 (non-test code only).
func TestImportArrows(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		rules, ok := rule(pkg)
		if !ok {
			t.Errorf("package %q has no import rule: add it to the table in arch_test.go (and DESIGN.md §2)", pkg)
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			if !permitted(dep, rules) {
				t.Errorf("%s imports %s, against the arrows of DESIGN.md §2", pkg, dep)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d packages; is go list working?", checked)
	}
}

// TestRuleTable checks the checker itself: a few imports it must refuse.
func TestRuleTable(t *testing.T) {
	for _, c := range []struct{ pkg, imp string }{
		{"schemas", "router"},
		{"schemas/clip", "schemas"},
		{"router/retry", "actors"},
		{"actors", "router"},
		{"sinks/webhook", "router"},
		{"router", "testkit"},
		{"router/store/disk", "actors"},
		{"router/store/internal/wire", "router/store/disk"},
		{"router/store/internal/wire", "router/internal/bucketkeys"},
		{"router", "router/httpapi"},
		{"router/httpapi", "actors"},
		{"router/httpapi", "router/store"},
		{"actors", "actors/deadletter"},
		{"actors/deadletter", "router"},
		{"router/console", "actors"},
		{"router/console", "router/httpapi"},
	} {
		rules, ok := rule(c.pkg)
		if !ok {
			t.Fatalf("no rule for %s", c.pkg)
		}
		if permitted(c.imp, rules) {
			t.Errorf("%s may import %s, but the arrows forbid it", c.pkg, c.imp)
		}
	}
}
