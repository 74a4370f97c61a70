package disk_test

import (
	"bytes"
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
