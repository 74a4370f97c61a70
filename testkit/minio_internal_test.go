package testkit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egridio/egrid/sinks"
)

// When another server takes the port StartMinIO chose before its MinIO binds it, StartMinIO
// must not take that server for its own (and share another test's data): its MinIO exits,
// and it starts again on other ports. The other server here is a fake standing for another
// test's MinIO: it answers the health check, and the bucket listing signed with the
// credentials every StartMinIO once shared, and refuses other credentials as MinIO does.
func TestStartMinIODoesNotAdoptAForeignServer(t *testing.T) {
	var writes atomic.Int32
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/minio/health/"):
			return
		case !strings.Contains(r.Header.Get("Authorization"), "Credential=egrid-test/"):
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The Access Key Id you provided does not exist in our records.</Message></Error>`))
		case r.Method == http.MethodGet && r.URL.Path == "/":
			w.Header().Set("Content-Type", "application/xml")
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner><ID>x</ID></Owner><Buckets></Buckets></ListAllMyBucketsResult>`))
		default:
			writes.Add(1)
		}
	}))
	defer foreign.Close()
	taken := foreign.Listener.Addr().String()
	tries := 0
	m := startMinIO(t, func() (string, string) {
		tries++
		if tries == 1 {
			return taken, freeAddr(t)
		}
		return freeAddr(t), freeAddr(t)
	})
	if m.Endpoint == taken {
		t.Fatalf("StartMinIO took the server already on %s for its own", taken)
	}
	if tries < 2 {
		t.Errorf("StartMinIO tried %d address, want a second after the first was taken", tries)
	}
	if _, err := m.Store().Put(context.Background(), "bucket", "key", []byte("body"), sinks.PutOptions{}); err != nil {
		t.Fatalf("writing to the started MinIO: %v", err)
	}
	if n := writes.Load(); n > 0 {
		t.Errorf("the foreign server got %d requests meant for the started MinIO", n)
	}
}
