package disk

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
)

// Pebble's report of a damaged block is one short line: its path, bounds and the error's
// message, without the error's stack trace. With pebble's own formatting (%+v of the
// details) each report carried a multi-KB Go stack trace, and one flipped block made egrid
// store check write 65 KB to stderr.
func TestPebbleDamageReportHasNoStackTrace(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	writeValStore(t, dir, 10, 0, func(s *Store) {
		if err := s.PutHistory(ctx, "orders", "billing", 0, []store.HistoryRecord{{EventID: "e1", Expires: time.Now().Add(time.Hour), Payload: []byte("h")}}); err != nil {
			t.Fatal(err)
		}
		isolateAndDamage(t, s, dir, historyKey(s.topics["orders"].subs["billing"].id, "e1"))
	})
	v := openVal(t, dir)
	if _, err := v.History(ctx, "orders", "billing", "e1", time.Now()); err == nil {
		t.Fatal("History of a damaged block: no error")
	}
	var reports []string
	for line := range strings.Lines(v.logs.String()) {
		if strings.Contains(line, `msg="pebble: damaged data"`) {
			reports = append(reports, line)
		}
	}
	if len(reports) == 0 {
		t.Fatalf("no report of pebble's of the damaged block; logs:\n%s", v.logs.String())
	}
	for _, r := range reports {
		if len(r) > 1024 || strings.Contains(r, ".go:") || strings.Contains(r, `\n`) || !strings.Contains(r, "checksum") {
			t.Errorf("pebble's report of a damaged block is %d bytes; want one short line with the error's message and no stack trace:\n%s", len(r), r)
		}
	}
}
