package disk

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// FormatVersion is the on-disk format this code writes, recorded under the key V (keys.go)
// so that a later egrid can tell which layout a directory holds and upgrade it, and an
// older egrid refuses a directory it would misread instead of taking it in.
//
// Format 1 is the layout doc.go describes: every journal, subscription state, definition,
// dead letter and history in one pebble database. Stores written before the version key
// existed hold that layout with no V key; Open reads them as format 1 and records the
// version (testdata/store-format1 is such a store, made by that code). A later format that
// changes the layout (a journal moved out of pebble, say) raises the number and upgrades an
// older store at Open, in one synced batch with the new version, so a crash leaves either
// the old layout with the old number or the new one with the new number.
const FormatVersion = 1

// ErrNewerFormat is returned (wrapped) by [Open] on a store written in a format newer than
// [FormatVersion]: a newer egrid wrote it, and this one would misread it.
var ErrNewerFormat = errors.New("disk store: written in a newer format")

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

// checkFormat refuses a store in a newer format than [FormatVersion] and records the
// version in a store that has none (unless read-only). Format 1 is the only one so far, so
// there is nothing to upgrade yet; an upgrade from an older format goes here.
func (s *Store) checkFormat(g *generation) error {
	version, recorded, err := readFormat(g.db)
	if err != nil {
		return err
	}
	if version > FormatVersion {
		return fmt.Errorf("%w: the store is in format %d and this egrid reads formats up to %d: run the egrid release that wrote it (or a newer one), or restore a backup made for this release", ErrNewerFormat, version, FormatVersion)
	}
	if recorded || s.opts.ReadOnly {
		return nil
	}
	b := g.db.NewBatch()
	if err := b.Set(formatKey, encodeUint64(FormatVersion), nil); err != nil {
		_ = b.Close()
		return err
	}
	return g.commit(b, pebble.Sync, s.onFail)
}
