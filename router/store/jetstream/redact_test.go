package jetstream_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/store/jetstream"
)

// RedactURLs leaves the user information (user:password@, token@) out of every URL of a list,
// parsable or not, and leaves everything else as it is.
func TestRedactURLs(t *testing.T) {
	tests := []struct{ in, want string }{
		{in: "nats://127.0.0.1:4222", want: "nats://127.0.0.1:4222"},
		{in: "nats://egrid:s3cret@n1:4222", want: "nats://n1:4222"},
		{in: "tls://t0ken@n1:4222", want: "tls://n1:4222"},
		{in: "nats://n0:4222,nats://egrid:s3cret@n1:4222,t0ken@n2:4222", want: "nats://n0:4222,nats://n1:4222,n2:4222"},
		{in: "nats://egrid:s3/cr#e@t@n1:4222", want: "nats://n1:4222"}, // unescaped, not a URL
		{in: "egrid:s3cret@n1:4222", want: "n1:4222"},
		{in: "", want: ""},
	}
	for _, tc := range tests {
		if got := jetstream.RedactURLs(tc.in); got != tc.want {
			t.Errorf("RedactURLs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// RedactError replaces a URL parse error, which quotes the URL and its password, and passes
// any other error on.
func TestRedactError(t *testing.T) {
	_, perr := url.Parse("nats://egrid:s3cret%zz@n1:4222")
	err := jetstream.RedactError(perr)
	if msg := err.Error(); strings.Contains(msg, "s3cret") || !strings.Contains(msg, "nats://n1:4222") || !strings.Contains(msg, "percent-encoded") {
		t.Errorf("RedactError(%v) = %q; want it to name nats://n1:4222 without the password and say what to do", perr, msg)
	}
	other := errors.New("nats: no servers available for connection")
	if err := jetstream.RedactError(other); err != other {
		t.Errorf("RedactError(%v) = %v, want it unchanged", other, err)
	}
}

// Dial's error names the server without the credentials of its URL.
func TestDialErrorHidesCredentials(t *testing.T) {
	for _, u := range []string{"nats://egrid:s3cret@127.0.0.1:1", "nats://egrid:s3cret%zz@127.0.0.1:1"} {
		_, err := jetstream.Dial(t.Context(), u, jetstream.Options{Prefix: "REDACT"})
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "nats://127.0.0.1:1") {
			t.Errorf("Dial(%s): %v; want an error naming nats://127.0.0.1:1 without the password", u, err)
		}
	}
}
