package disk

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/secretfile"
)

// Encryption at rest.
//
// Topic and subscription definitions hold topic keys, secret delivery headers and endpoint
// query secrets. With Options.SecretKey set they are stored sealed with AES-256-GCM: the
// value is formatSealed, the uvarint id, a 12-byte random nonce and the ciphertext of the
// spec, with the record's key as additional data (a sealed definition cannot be moved to
// another name). A key check (K) sealed with the same key tells a wrong key from corruption.
//
// Existing plaintext definitions (a store from before the key was given) are read and
// sealed at Open, in one synced batch; pebble drops the plaintext copies as it compacts.
// Without a key, a store whose definitions are sealed refuses to open, and so does a store
// opened with another key: both say which setting to fix. A damaged key check is not taken
// for a wrong key when a definition opens with the key given (checkKey).

// formatSealed is the version byte of a sealed definition.
const formatSealed = 2

// keyCheckPlain is what the key check seals.
var keyCheckPlain = []byte("egrid secret key check v1")

// ErrSecretKey is wrapped by Open's error when the secret key does not fit the store: sealed
// definitions and no key, or a key that does not open them.
var ErrSecretKey = errors.New("disk store: secret key does not fit the stored definitions")

// sealer seals and opens definitions with one key.
type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("the secret key has %d bytes: use 32 (AES-256)", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal returns the value of a sealed definition: formatSealed, id, nonce, ciphertext.
func (s *sealer) seal(key []byte, id uint64, spec []byte) []byte {
	dst := binary.AppendUvarint([]byte{formatSealed}, id)
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(fmt.Errorf("reading random bytes: %w", err)) // crypto/rand does not fail on supported platforms
	}
	dst = append(dst, nonce...)
	return s.aead.Seal(dst, nonce, spec, key)
}

// open decodes a sealed definition.
func (s *sealer) open(key, v []byte) (id uint64, spec []byte, err error) {
	if len(v) < 1 || v[0] != formatSealed {
		return 0, nil, fmt.Errorf("%w: not a sealed value", errCorrupt)
	}
	id, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: bad id", errCorrupt)
	}
	rest := v[1+n:]
	ns := s.aead.NonceSize()
	if len(rest) < ns+s.aead.Overhead() {
		return 0, nil, fmt.Errorf("%w: sealed value too short", errCorrupt)
	}
	spec, err = s.aead.Open(nil, rest[:ns], rest[ns:], key)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: it does not open with the secret key (wrong key, or the value is damaged)", ErrSecretKey)
	}
	if len(spec) == 0 {
		spec = nil
	}
	return id, spec, nil
}

// encodeDef encodes a definition stored under key: sealed when the store has a secret key.
func (s *Store) encodeDef(key []byte, id uint64, spec []byte) []byte {
	if s.sealer != nil {
		return s.sealer.seal(key, id, spec)
	}
	return appendDef(nil, id, spec)
}

// decodeDef decodes a definition stored under key, plaintext or sealed.
func (s *Store) decodeDef(key, v []byte) (id uint64, spec []byte, err error) {
	if len(v) > 0 && v[0] == formatSealed {
		switch {
		case s.sealer == nil && s.keyChecked:
			return 0, nil, fmt.Errorf("%w: it looks sealed, but the store has no key check: no definition was ever sealed", errCorrupt)
		case s.sealer == nil:
			return 0, nil, fmt.Errorf("%w: the definitions are encrypted: give the secret key they were written with (--secret-key-file or EGRID_SECRET_KEY_FILE)", ErrSecretKey)
		}
		return s.sealer.open(key, v)
	}
	return decodeDef(v)
}

// ReadSecretKey reads a 32-byte secret key from a file holding it as 64 hex digits, as
// base64, or as the 32 raw bytes. The file is read by [secretfile.Read]: a regular file of at
// most 64 KiB, whose mode, taken from the file read, must not let group or others in.
func ReadSecretKey(path string) ([]byte, error) {
	raw, mode, err := secretfile.Read(path)
	switch {
	case errors.Is(err, secretfile.ErrNotRegular), errors.Is(err, secretfile.ErrTooLarge):
		return nil, err // it names the file and what to do
	case err != nil:
		return nil, fmt.Errorf("reading the secret key: %w", err)
	case secretfile.Exposed(mode):
		return nil, fmt.Errorf("the secret key file %s can be read by group or others (mode %04o): run chmod 600 %s", path, mode.Perm(), path)
	}
	if len(raw) == 32 {
		return raw, nil
	}
	text := strings.TrimSpace(string(raw))
	if k, err := hex.DecodeString(text); err == nil && len(k) == 32 {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(text); err == nil && len(k) == 32 {
		return k, nil
	}
	return nil, fmt.Errorf("the secret key file %s holds no 32-byte key: write 64 hex digits (openssl rand -hex 32 > %s)", path, path)
}

// checkKey checks the secret key against the store's key check (K) and, with a key, seals
// every plaintext definition and writes the key check, in one synced batch. It runs before
// load, so damage it meets is told apart from a key that does not fit:
//
//   - a key check that a damaged table block keeps from being read, or that does not open
//     with the key given, is damaged when a sealed definition opens with that key: the key
//     is right (keyChecked), the key check is reported (keyCheckDamage) and written again;
//     when none opens, the key does not fit and Open refuses, as a matter of configuration;
//   - no key check at all means no definition was ever sealed (the first seal writes it, in
//     the same batch): a definition that looks sealed is damaged, not sealed with a key the
//     store was not given (keyChecked);
//   - a damaged table block among the definitions, met while sealing or proving the key,
//     refuses Open as load would (catalogCorrupt), with the error that says what to do.
func (s *Store) checkKey(g *generation) error {
	v, ok, err := get(g.db, keyCheckKey)
	lost := ""
	switch {
	case pebble.IsCorruptionError(err):
		lost, ok = DamageTable, false
	case err != nil:
		return err
	}
	switch {
	case lost != "" && s.sealer == nil:
		return nil // sealed definitions, if any, refuse the load: give the key
	case ok && s.sealer == nil:
		return fmt.Errorf("%w: the definitions are encrypted: give the secret key they were written with (--secret-key-file or EGRID_SECRET_KEY_FILE)", ErrSecretKey)
	case ok:
		if _, _, err := s.sealer.open(keyCheckKey, v); err != nil {
			lost = DamageDefinition
		} else {
			s.keyChecked = true
		}
	case lost == "":
		s.keyChecked = true // nothing was ever sealed
	}
	if lost != "" {
		proven, sealed, err := s.keyProven(g)
		if err != nil {
			return err
		}
		if !proven && (sealed || lost == DamageDefinition) {
			what := "the secret key is not the one the definitions were written with"
			if lost == DamageTable {
				what = "the key check is in a damaged table block and no definition opens with the secret key: it is not the one they were written with"
			}
			return fmt.Errorf("%w: %s: give that key (--secret-key-file or EGRID_SECRET_KEY_FILE)", ErrSecretKey, what)
		}
		if proven {
			s.keyCheckDamage(lost)
		}
		s.keyChecked, ok = true, false // written again below
	}
	if s.sealer == nil || s.opts.ReadOnly {
		return nil
	}
	b := g.db.NewBatch()
	var errs []error
	if !ok {
		errs = append(errs, b.Set(keyCheckKey, s.sealer.seal(keyCheckKey, 0, keyCheckPlain), nil))
	}
	sealed := 0
	for _, p := range []byte{prefixTopic, prefixSub} {
		errs = append(errs, scan(g.db, []byte{p}, []byte{p + 1}, func(k, v []byte) error {
			if len(v) > 0 && v[0] == formatSealed {
				return nil
			}
			id, spec, err := decodeDef(v)
			if err != nil {
				return nil // damaged: load reports it (defdamage.go)
			}
			sealed++
			return b.Set(k, s.sealer.seal(k, id, spec), nil)
		}))
	}
	if err := errors.Join(errs...); err != nil {
		_ = b.Close()
		if pebble.IsCorruptionError(err) {
			return s.catalogCorrupt(err)
		}
		return err
	}
	if b.Empty() {
		_ = b.Close()
		return nil
	}
	if err := g.commit(b, pebble.Sync, s.onFail); err != nil {
		return err
	}
	if sealed > 0 {
		s.log.Info("disk store: encrypted the stored definitions with the secret key", "definitions", sealed)
	}
	return nil
}

// keyProven reports whether a sealed definition opens with the secret key (proving the key
// right without the key check), and whether any sealed definition was found.
func (s *Store) keyProven(g *generation) (proven, sealed bool, err error) {
	for _, p := range []byte{prefixTopic, prefixSub} {
		err := scan(g.db, []byte{p}, []byte{p + 1}, func(k, v []byte) error {
			if len(v) == 0 || v[0] != formatSealed {
				return nil
			}
			sealed = true
			if _, _, err := s.sealer.open(k, v); err == nil {
				proven = true
				return errStop
			}
			return nil
		})
		if pebble.IsCorruptionError(err) {
			return false, false, s.catalogCorrupt(err)
		}
		if err != nil || proven {
			return proven, sealed, err
		}
	}
	return false, sealed, nil
}

// keyCheckDamage reports, once, a key check lost (kind: DamageTable when pebble reports it
// damaged, DamageDefinition when it does not open) although a definition proved the key
// right: nothing is lost, and checkKey writes it again.
func (s *Store) keyCheckDamage(kind string) {
	what := "does not open with the secret key, which opens the definitions"
	if kind == DamageTable {
		what = "is in a damaged table block"
	}
	s.log.Error("disk store: the secret key check (the value that tells a wrong key from damage) "+what+"; the definitions open with the key given, so it is right: the key check is written again and nothing is lost. egrid store check --data-dir DIR lists the damage",
		"dir", s.dir)
	s.loadProblems = append(s.loadProblems, fmt.Errorf("%w: the secret key check %s: nothing is lost (a running egrid writes it again)", ErrCorrupt, what))
	s.damaged(kind)
}

// checkPrivate refuses a data directory that group or others can read, write or enter: it
// holds topic keys and delivery secrets (not on Windows, whose modes do not say: see
// secretfile.Exposed). Files in it that others could read are made
// private (stores written before files were created 0600).
func checkPrivate(dir string) error {
	info, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil // pebble creates it 0700 (fenceFS.MkdirAll)
	}
	if err != nil {
		return fmt.Errorf("checking the data directory: %w", err)
	}
	if perm := info.Mode().Perm(); secretfile.Exposed(perm) {
		return fmt.Errorf("the data directory %s is open to group or others (mode %04o) and holds topic keys and delivery secrets: run chmod 700 %s", dir, perm, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checking the data directory: %w", err)
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && secretfile.Exposed(fi.Mode()) {
			_ = os.Chmod(filepath.Join(dir, e.Name()), 0o600)
		}
	}
	return nil
}
