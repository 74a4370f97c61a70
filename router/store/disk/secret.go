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
// opened with another key: both say which setting to fix.

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
		if s.sealer == nil {
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
// every plaintext definition and writes the key check, in one synced batch.
func (s *Store) checkKey(g *generation) error {
	v, ok, err := get(g.db, keyCheckKey)
	if err != nil {
		return err
	}
	switch {
	case ok && s.sealer == nil:
		return fmt.Errorf("%w: the definitions are encrypted: give the secret key they were written with (--secret-key-file or EGRID_SECRET_KEY_FILE)", ErrSecretKey)
	case ok:
		if _, _, err := s.sealer.open(keyCheckKey, v); err != nil {
			return fmt.Errorf("%w: the secret key is not the one the definitions were written with: give that key (--secret-key-file or EGRID_SECRET_KEY_FILE)", ErrSecretKey)
		}
		s.keyChecked = true
	case s.sealer == nil, s.opts.ReadOnly:
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
