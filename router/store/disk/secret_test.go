package disk_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/store/disk"
)

// storeHolds reports whether any file under dir contains s.
func storeHolds(t *testing.T, dir, s string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found = found || bytes.Contains(b, []byte(s))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// writeDefs opens the store in dir with key, writes a topic and a subscription whose specs
// hold secret, and closes it.
func writeDefs(t *testing.T, dir string, key []byte, secret string) {
	t.Helper()
	ctx := t.Context()
	s, err := disk.Open(dir, disk.Options{SecretKey: key})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.PutTopic(ctx, "t", []byte(`{"key1":"`+secret+`"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "t", "sub", []byte(`{"headers":{"X-Secret":"`+secret+`"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// readDefs opens the store in dir with key and returns the topic's and subscription's specs.
func readDefs(t *testing.T, dir string, key []byte) (topic, sub string, err error) {
	t.Helper()
	ctx := t.Context()
	s, err := disk.Open(dir, disk.Options{SecretKey: key})
	if err != nil {
		return "", "", err
	}
	defer s.Close()
	topics, err := s.Topics(ctx)
	if err != nil || len(topics) != 1 {
		t.Fatalf("Topics = %v, %v", topics, err)
	}
	subs, err := s.Subscriptions(ctx, "t")
	if err != nil || len(subs) != 1 {
		t.Fatalf("Subscriptions = %v, %v", subs, err)
	}
	return string(topics[0].Spec), string(subs[0].Spec), nil
}

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// With a secret key, definitions are sealed on disk: no file holds their plaintext, they read
// back with the key, and the store refuses to open without it or with another key, saying
// which setting to fix. Without a key the plaintext is on disk (the control).
func TestSecretKeySealsDefinitions(t *testing.T) {
	const secret = "sekrit-topic-key-0123456789"
	plain := filepath.Join(t.TempDir(), "plain")
	writeDefs(t, plain, nil, secret)
	if !storeHolds(t, plain, secret) {
		t.Fatal("control: the plaintext store does not hold the secret; the check below proves nothing")
	}

	dir := filepath.Join(t.TempDir(), "sealed")
	writeDefs(t, dir, key(1), secret)
	if storeHolds(t, dir, secret) {
		t.Errorf("a store written with a secret key holds a definition's plaintext")
	}
	topic, sub, err := readDefs(t, dir, key(1))
	if err != nil || !strings.Contains(topic, secret) || !strings.Contains(sub, secret) {
		t.Errorf("definitions read with the key = %q, %q, %v; want them back", topic, sub, err)
	}
	for _, tc := range []struct {
		name string
		key  []byte
		says string
	}{
		{"no key", nil, "--secret-key-file"},
		{"another key", key(2), "not the one"},
	} {
		_, err := disk.Open(dir, disk.Options{SecretKey: tc.key})
		if !errors.Is(err, disk.ErrSecretKey) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Open with %s: err = %v, want disk.ErrSecretKey saying %q", tc.name, err, tc.says)
		}
	}
}

// A store written without a key and opened with one has its definitions sealed at Open;
// from then on it needs the key.
func TestSecretKeySealsExistingDefinitions(t *testing.T) {
	const secret = "old-plaintext-secret"
	dir := filepath.Join(t.TempDir(), "db")
	writeDefs(t, dir, nil, secret)
	if topic, _, err := readDefs(t, dir, key(7)); err != nil || !strings.Contains(topic, secret) {
		t.Fatalf("reading a plaintext store with a key = %q, %v; want the definition", topic, err)
	}
	if _, err := disk.Open(dir, disk.Options{}); !errors.Is(err, disk.ErrSecretKey) {
		t.Errorf("Open without the key after sealing: err = %v, want disk.ErrSecretKey", err)
	}
	if topic, sub, err := readDefs(t, dir, key(7)); err != nil || !strings.Contains(topic, secret) || !strings.Contains(sub, secret) {
		t.Errorf("definitions after sealing = %q, %q, %v", topic, sub, err)
	}
}

// Store files are private: the directory the store creates is 0700 and every file in it
// 0600, whatever the umask.
func TestStoreFilesArePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	writeDefs(t, dir, nil, "x")
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("data directory mode = %04o, want 0700", perm)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
}

// With PrivateDir (egrid serve) a data directory open to group or others is refused with the
// command that fixes it; once fixed, the store opens and its older files are made private.
func TestPrivateDirRefusesAnOpenDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	writeDefs(t, dir, nil, "x")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(loose, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := disk.Open(dir, disk.Options{PrivateDir: true})
	if err == nil || !strings.Contains(err.Error(), "chmod 700 "+dir) {
		t.Fatalf("Open of a 0755 directory: err = %v, want a refusal naming chmod 700 %s", err, dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := disk.Open(dir, disk.Options{PrivateDir: true})
	if err != nil {
		t.Fatalf("Open after chmod 700: %v", err)
	}
	_ = s.Close()
	if fi, err := os.Stat(loose); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("an older file open to others after Open: %v, %v; want 0600", fi.Mode().Perm(), err)
	}
}

// ReadSecretKey reads a 32-byte key written as 64 hex digits, as base64 or as the raw bytes,
// from a private regular file of at most 64 KiB; anything else is an error naming the file
// and what to do, read from the one open file.
func TestReadSecretKey(t *testing.T) {
	k := bytes.Repeat([]byte{0xab}, 32)
	write := func(t *testing.T, content []byte, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), "key")
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		content []byte
		mode    os.FileMode
		says    string // "": the key is read
	}{
		{name: "hex", content: []byte(hex.EncodeToString(k) + "\n"), mode: 0o600},
		{name: "base64", content: []byte(base64.StdEncoding.EncodeToString(k)), mode: 0o400},
		{name: "raw", content: k, mode: 0o600},
		{name: "readable by others", content: []byte(hex.EncodeToString(k)), mode: 0o644, says: "can be read by group or others (mode 0644): run chmod 600 "},
		{name: "no key", content: []byte("short"), mode: 0o600, says: "holds no 32-byte key: write 64 hex digits"},
		{name: "over 64 KiB", content: []byte(strings.Repeat("0", 64<<10+1)), mode: 0o600, says: "is over 64 KiB (65537 bytes): it must hold the secret alone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(t, tc.content, tc.mode)
			got, err := disk.ReadSecretKey(p)
			if tc.says == "" {
				if err != nil || !bytes.Equal(got, k) {
					t.Fatalf("ReadSecretKey = %x, %v; want %x", got, err, k)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("ReadSecretKey = %v; want an error naming %s and saying %q", err, p, tc.says)
			}
		})
	}
	dir := t.TempDir()
	if _, err := disk.ReadSecretKey(dir); err == nil || !strings.Contains(err.Error(), "the secret file "+dir+" is a directory, not a regular file") {
		t.Errorf("ReadSecretKey(a directory) = %v; want an error saying it is not a regular file", err)
	}
	missing := filepath.Join(dir, "nonexistent")
	if _, err := disk.ReadSecretKey(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "reading the secret key: ") {
		t.Errorf("ReadSecretKey(a missing file) = %v; want ErrNotExist", err)
	}
}
