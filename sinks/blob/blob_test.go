package blob_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/blob"
	"github.com/egridio/egrid/testkit"
	"github.com/egridio/egrid/testkit/sinktest"
)

// The MinIO store passes the same conformance suite as the test kit's in-memory store.
func TestStoreConformance(t *testing.T) {
	m := testkit.StartMinIO(t)
	store := m.Store()
	var n atomic.Int64
	sinktest.ObjectStore(t, func(*testing.T) sinks.ObjectStore { return store }, func(*testing.T) string {
		return fmt.Sprintf("conformance-%d", n.Add(1))
	})
}

func TestStoreWithoutCreateBuckets(t *testing.T) {
	m := testkit.StartMinIO(t)
	cfg := m.Config()
	cfg.CreateBuckets = false
	s, err := blob.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, "missing", "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"}); !errors.Is(err, sinks.ErrBucketNotFound) {
		t.Fatalf("Put to a missing bucket without CreateBuckets: %v, want ErrBucketNotFound", err)
	}
	if _, err := m.Store().Put(ctx, "missing", "seed", []byte("x"), sinks.PutOptions{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	info, err := s.Put(ctx, "missing", "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"})
	if err != nil {
		t.Fatalf("Put once the bucket exists: %v", err)
	}
	if want := "http://" + m.Endpoint + "/missing/k"; info.URL != want {
		t.Errorf("URL = %s, want %s", info.URL, want)
	}
}

// A server that is down is an error that is neither "not found" sentinel: the dead-letter
// actor retries it.
func TestStoreServerDown(t *testing.T) {
	m := testkit.StartMinIO(t)
	s := m.Store()
	m.Stop()
	_, err := s.Put(context.Background(), "down-test", "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"})
	if err == nil || errors.Is(err, sinks.ErrBucketNotFound) || errors.Is(err, sinks.ErrObjectNotFound) {
		t.Fatalf("Put to a stopped server: %v, want an unavailability error", err)
	}
	if !strings.Contains(err.Error(), m.Endpoint) {
		t.Errorf("error %q does not name the server", err)
	}
	m.Start()
	if _, err := s.Put(context.Background(), "down-test", "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"}); err != nil {
		t.Errorf("Put after the server came back: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  blob.Config
		want []string
	}{
		{"valid", blob.Config{Endpoint: "127.0.0.1:9000", AccessKey: "a", SecretKey: "b"}, nil},
		{"everything missing", blob.Config{}, []string{"endpoint: required", "access key and secret key"}},
		{"scheme", blob.Config{Endpoint: "http://minio:9000", AccessKey: "a", SecretKey: "b"}, []string{"without a scheme"}},
		{"path", blob.Config{Endpoint: "minio:9000/x", AccessKey: "a", SecretKey: "b"}, []string{"without a path"}},
		{"retries", blob.Config{Endpoint: "minio:9000", AccessKey: "a", SecretKey: "b", MaxRetries: -1}, []string{"maxRetries"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed, want %v", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, err := blob.New(tt.cfg, nil); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

// A write MinIO refuses for what it is — the bucket name it reserves ("minio") — is
// sinks.ErrRefused with the S3 code, not an unavailability; a server that is down is not.
func TestStoreRefusalKeepsTheS3Code(t *testing.T) {
	m := testkit.StartMinIO(t)
	s := m.Store()
	ctx := context.Background()
	_, err := s.Put(ctx, "minio", "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"})
	if !errors.Is(err, sinks.ErrRefused) || errors.Is(err, sinks.ErrCredentialsRefused) || sinks.RefusalCode(err) == "" {
		t.Fatalf("Put to the reserved bucket minio: %v, want ErrRefused with its S3 code", err)
	}
	if !strings.Contains(err.Error(), sinks.RefusalCode(err)) {
		t.Errorf("the error %q does not name the S3 code %s", err, sinks.RefusalCode(err))
	}
	m.Stop()
	_, err = s.Put(ctx, "refusal-test", "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"})
	if err == nil || errors.Is(err, sinks.ErrRefused) {
		t.Fatalf("Put to a stopped server: %v, want an unavailability, not a refusal", err)
	}
}

// Credentials MinIO does not accept are said to be refused, by Ping (the readiness check) and
// by a write, with the S3 code.
func TestStoreWrongCredentialsAreRefused(t *testing.T) {
	m := testkit.StartMinIO(t)
	for _, change := range []func(*blob.Config){
		func(c *blob.Config) { c.SecretKey += "-wrong" },
		func(c *blob.Config) { c.AccessKey = "nobody-" + c.AccessKey },
	} {
		cfg := m.Config()
		change(&cfg)
		s, err := blob.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Ping(context.Background())
		if !errors.Is(err, sinks.ErrCredentialsRefused) || !errors.Is(err, sinks.ErrRefused) {
			t.Fatalf("Ping with wrong credentials: %v, want ErrCredentialsRefused", err)
		}
		if code := sinks.RefusalCode(err); code != "SignatureDoesNotMatch" && code != "InvalidAccessKeyId" {
			t.Errorf("code %q, want SignatureDoesNotMatch or InvalidAccessKeyId", code)
		}
		if !strings.Contains(err.Error(), "does not accept the credentials") {
			t.Errorf("Ping's error %q does not say the credentials were refused", err)
		}
		_, err = s.Put(context.Background(), "creds-test", "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"})
		if !errors.Is(err, sinks.ErrCredentialsRefused) {
			t.Errorf("Put with wrong credentials: %v, want ErrCredentialsRefused", err)
		}
	}
}
