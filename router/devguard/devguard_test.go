package devguard_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/devguard"
)

func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		name, method, host, publicURL string
		header                        map[string]string
		refused                       string // in the error; "" means let in
	}{
		{name: "localhost", method: "POST", host: "localhost:8080"},
		{name: "localhost in capitals, no port", method: "POST", host: "LOCALHOST"},
		{name: "loopback address", method: "POST", host: "127.0.0.1:8080"},
		{name: "loopback v6", method: "POST", host: "[::1]:8080"},
		{name: "an address of the machine", method: "POST", host: "192.168.1.20:8080"},
		{name: "publicUrl's host", method: "POST", host: "egrid:8080", publicURL: "http://egrid:8080/"},
		{name: "a rebound name", method: "GET", host: "rebind.attacker.example:8080", refused: `Host "rebind.attacker.example:8080"`},
		{name: "a rebound name beside publicUrl", method: "GET", host: "rebind.attacker.example", publicURL: "https://egrid.example.com", refused: "publicUrl"},
		{name: "a name under localhost", method: "GET", host: "localhost.attacker.example", refused: "Host"},
		{name: "no Host", method: "GET", host: "", refused: "Host"},
		{name: "a long Host is clipped", method: "GET", host: strings.Repeat("a", 1000), refused: "..."},
		{name: "a cross-site POST", method: "POST", host: "localhost:8080", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, refused: "web page of another site"},
		{name: "a same-site POST of another port", method: "POST", host: "localhost:8080", header: map[string]string{"Sec-Fetch-Site": "same-site"}, refused: "web page"},
		{name: "a POST from another Origin", method: "POST", host: "localhost:8080", header: map[string]string{"Origin": "https://attacker.example"}, refused: "web page"},
		{name: "a cross-site GET", method: "GET", host: "localhost:8080", header: map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{name: "the server's own page", method: "DELETE", host: "localhost:8080", header: map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost:8080"}},
		{name: "a program (no browser headers)", method: "PUT", host: "127.0.0.1:8080"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "/admin/topics", nil)
			req.Host = tt.host
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			err := devguard.Check(req, tt.publicURL)
			switch {
			case tt.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.refused != "" && err == nil:
				t.Errorf("let in; want refused")
			case err != nil && (!strings.Contains(err.Error(), tt.refused) || !strings.Contains(err.Error(), "--insecure-dev") || len(err.Error()) > 1000):
				t.Errorf("error %q; want it to name %q and --insecure-dev, within 1000 bytes", err, tt.refused)
			}
		})
	}
}
