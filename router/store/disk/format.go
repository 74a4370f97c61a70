package disk

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FormatVersion is the on-disk format this code writes, recorded under the key V (keys.go)
// so that a later egrid can tell which layout a directory holds and upgrade it, and an
// older egrid refuses a directory it would misread instead of taking it in.
//
//   - Format 1: the layout doc.go describes, with one journal entry per key (J topicID seq →
//     entry). Stores written before the version key existed hold it with no V key; Open
//     reads them as format 1 (testdata/store-format1 is such a store, made by that code).
//   - Format 2: journal blocks — the consecutive entries of one Append, up to
//     maxBlockEntries, in one value keyed by the last one's seq (J topicID lastSeq → block,
//     codec.go). Pebble's per-key work (memtable inserts, flush and compaction iteration)
//     then comes once per block instead of once per event.
//
// Format 2 reads format 1 as it is: a format-1 entry is a block of one, keyed by its seq,
// and its value's first byte (1, not 2) says which it is. Upgrading a format-1 store is
// therefore only recording the new number; its entries are read where they are until the
// journal is trimmed past them. A later format that changes the layout in a way the reader
// cannot take as it is rewrites the older data at Open, in one synced batch with the new
// number, so a crash leaves either the old layout with the old number or the new one with
// the new number. A new format is also the only occasion to raise the format of pebble's own
// files (pebbleFormat).
const FormatVersion = 2

// pebbleFormat is the format of pebble's own files (pebble's format major version) the store
// keeps: Open raises an older store's to it, saying so in an INFO line, and never further,
// whatever the linked pebble calls newest (pebble.FormatNewest), so that upgrading pebble
// changes nothing on disk by itself. It is raised only together with [FormatVersion]: an egrid
// whose pebble knows the files then refuses the store with [ErrNewerFormat] and its remedy,
// and one whose pebble does not is told the same by Open (newerPebbleFormat), rather than
// failing with pebble's error. README's "On-disk format" gives its number
// (TestPebbleFormatIsTheOneTheREADMEGives). It is pebble.FormatNewest of pebble v2.1.7.
const pebbleFormat = pebble.FormatValueSeparation

// ErrNewerFormat is returned (wrapped) by [Open] on a store written in a format newer than
// [FormatVersion], or whose pebble files are in a format the linked pebble does not know: a
// newer egrid wrote it, and this one would misread it.
var ErrNewerFormat = errors.New("disk store: written in a newer format")

// unknownPebbleFormatRE matches pebble's refusal of a directory whose format-version marker
// names a format it does not know.
var unknownPebbleFormatRE = regexp.MustCompile(`written in unknown format major version (\d+)`)

// peekPebbleFormat returns the format of pebble's files in dir on fs, 0 for a directory with
// none (a new store) or one pebble.Open is left to report on. A format this egrid's pebble does
// not know is refused with [ErrNewerFormat], saying what to do.
func peekPebbleFormat(fs vfs.FS, dir string) (pebble.FormatMajorVersion, error) {
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		if m := unknownPebbleFormatRE.FindStringSubmatch(err.Error()); m != nil {
			return 0, fmt.Errorf("%w: pebble's files are in format %s and this egrid knows formats up to %d: run the egrid release that wrote it (or a newer one), or restore a backup made for this release", ErrNewerFormat, m[1], uint64(pebbleFormat))
		}
		return 0, nil
	}
	if !desc.Exists {
		return 0, nil
	}
	return desc.FormatMajorVersion, nil
}

var formatKey = []byte{prefixFormat}

// readFormat returns the format version recorded in db: 1 when none is (a store written
// before the version key existed, or a new empty one), and whether one was recorded.
func readFormat(db *pebble.DB) (version uint64, recorded bool, err error) {
	v, ok, err := get(db, formatKey)
	if err != nil || !ok {
		return 1, false, err
	}
	n, ok := decodeUint64(v)
	if !ok {
		return 0, true, fmt.Errorf("%w: the format version (key V) is %d bytes, not 8: restore the directory from a backup", ErrCorrupt, len(v))
	}
	return n, true, nil
}

// checkFormat refuses a store in a newer format than [FormatVersion] and records the current
// version in an older store (unless read-only): every older format is read as it is. A format
// version in a damaged table block refuses the start as damage (formatCorrupt).
func (s *Store) checkFormat(g *generation) error {
	version, recorded, err := readFormat(g.db)
	if pebble.IsCorruptionError(err) {
		return s.formatCorrupt(err)
	}
	if err != nil {
		return err
	}
	if version > FormatVersion {
		return fmt.Errorf("%w: the store is in format %d and this egrid reads formats up to %d: run the egrid release that wrote it (or a newer one), or restore a backup made for this release", ErrNewerFormat, version, FormatVersion)
	}
	if (recorded && version == FormatVersion) || s.opts.ReadOnly {
		return nil
	}
	// A next id that pebble reports damaged says the store is used: load recomputes it.
	if _, used, err := get(g.db, nextIDKey); err != nil && !pebble.IsCorruptionError(err) {
		return err
	} else if (used || err != nil) && version < FormatVersion {
		s.log.Info("disk store: upgrading the store's format; its journal entries are read where they are", "dir", s.dir, "from", version, "to", FormatVersion)
	}
	b := g.db.NewBatch()
	if err := b.Set(formatKey, encodeUint64(FormatVersion), nil); err != nil {
		_ = b.Close()
		return err
	}
	return g.commit(b, pebble.Sync, s.onFail)
}

// formatCorrupt is checkFormat's error when pebble reports damage as it reads the format
// version: the store cannot tell how to read its data, so Open refuses to start, as load does
// for a damaged block among the definitions (catalogCorrupt; V sorts right after them, so the
// two often share a block), saying what to do, counted, and listed by egrid store check.
func (s *Store) formatCorrupt(err error) error {
	p := fmt.Errorf("%w: the store's format version (key V) is in a damaged table block and cannot be read (%v), with whatever the block holds beside it (the topic definitions last by name, when there are any): egrid cannot tell how to read the store. Restore the directory from a backup; egrid store check --data-dir %s lists the damage", ErrCorrupt, err, s.dir)
	s.log.Error("disk store: damage found; refusing to start", "dir", s.dir, "err", p)
	s.damaged(DamageTable)
	return &damageError{problems: []error{p}}
}
