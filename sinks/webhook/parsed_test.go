package webhook_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/egridio/egrid/sinks/webhook"
)

// TestNewParsed: a URL the caller parsed already is checked as the string would be.
func TestNewParsed(t *testing.T) {
	for raw, want := range map[string]string{
		"https://example.com/events?code=secret": "",
		"ftp://example.com/events":               `scheme "ftp" is not supported`,
		"http://example.com:70000/":              `port "70000" is out of range`,
		"/relative":                              "is not absolute",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = webhook.New(webhook.Config{URL: raw, Parsed: u}, nil)
		_, errStr := webhook.New(webhook.Config{URL: raw}, nil)
		switch {
		case want == "" && (err != nil || errStr != nil):
			t.Errorf("%s: New = %v (from the string: %v), want no error", raw, err, errStr)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: New = %v, want an error saying %q", raw, err, want)
		case want != "" && (errStr == nil || errStr.Error() != err.Error()):
			t.Errorf("%s: New from the string = %v, from the parsed URL = %v: want the same", raw, errStr, err)
		}
	}
}
