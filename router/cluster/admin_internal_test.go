package cluster

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// An admin answer over the connection's max_payload cannot be sent: the node hands the error
// to the answer's unsent (which undoes what the answer handed out, a receive's locks) and
// sends the short answer it returns instead, so the caller learns of it at once; the error
// was dropped, and the caller waited until its deadline for an answer that never came.
func TestAdminAnswerOverMaxPayloadIsReplaced(t *testing.T) {
	nc := testNATS(t)
	unsentErr := make(chan error, 1)
	instead := []byte(`{"err":"not sent"}`)
	n := joinTestNode(t, nc, "ADMINTEST", Hooks{
		Admin: func(_ context.Context, req []byte) ([]byte, func(error) []byte) {
			if string(req) == "small" {
				return []byte("ok"), func(error) []byte { t.Error("unsent called for an answer that was sent"); return nil }
			}
			return make([]byte, nc.MaxPayload()+1), func(err error) []byte {
				unsentErr <- err
				return instead
			}
		},
	})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if got, err := n.Request(ctx, "n1", []byte("small")); err != nil || string(got) != "ok" {
		t.Fatalf("Request of a small answer = %q, %v; want ok", got, err)
	}
	got, err := n.Request(ctx, "n1", []byte("large"))
	if err != nil || !bytes.Equal(got, instead) {
		t.Fatalf("Request of an answer over max_payload (%d bytes) = %q, %v; want unsent's answer %s", nc.MaxPayload(), got, err, instead)
	}
	select {
	case err := <-unsentErr:
		if !errors.Is(err, nats.ErrMaxPayload) {
			t.Errorf("unsent got %v, want nats.ErrMaxPayload", err)
		}
	default:
		t.Error("unsent was not called")
	}
}
