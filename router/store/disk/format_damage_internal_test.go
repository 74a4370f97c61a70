package disk

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// A damaged table block holding the format version (key V, which sorts right after the topic
// definitions and so often shares their block) refuses the start as damage: the error says
// what is damaged and what to do, wraps ErrCorrupt, is counted, and egrid store check lists
// it. Before, Open failed with pebble's bare error, nothing counted.
func TestDamagedFormatVersionBlockRefusesOpenSayingWhatToDo(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := Open(dir, Options{tune: noCompactions})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.gen.db.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := s.gen.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var table string
	for _, level := range levels {
		for _, f := range level {
			if f.Largest.UserKey[0] == prefixFormat {
				table = filepath.Join(dir, fmt.Sprintf("%06d.sst", f.FileNum))
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if table == "" {
		t.Fatalf("no table file holds the format version: %v", levels)
	}
	damageAt(t, table, 8)

	counts := map[string]int{}
	_, err = Open(dir, Options{tune: noCompactions, OnCorruption: func(kind string) { counts[kind]++ }})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "format version (key V) is in a damaged table block") ||
		!strings.Contains(err.Error(), "Restore the directory from a backup") || !strings.Contains(err.Error(), "egrid store check") {
		t.Fatalf("Open = %v; want ErrCorrupt saying the format version is damaged and what to do", err)
	}
	if counts[DamageTable] != 1 || len(counts) != 1 {
		t.Errorf("damage counted %v; want one table damage", counts)
	}
	r, err := Check(ctx, dir, nil, slog.New(slog.DiscardHandler))
	if err != nil || len(r.Problems) != 1 || !errors.Is(r.Problems[0], ErrCorrupt) || !strings.Contains(r.Problems[0].Error(), "format version") {
		t.Errorf("Check = %v, %v; want the damaged format version as its one problem", r.Problems, err)
	}
}
