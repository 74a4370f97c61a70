package devguard

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/egridio/egrid/schemas/clip"
)

// crossOrigin is net/http's CSRF check with no trusted origins.
var crossOrigin = http.NewCrossOriginProtection()

// Check returns nil when req may be let in without credentials, or an error saying why not
// and what to do. publicURL is the server's configured public URL ("" for none): requests
// addressed to its host are let in too, for a server other machines or containers reach by
// a name (with --insecure-dev-any-address). It is safe for concurrent use.
func Check(req *http.Request, publicURL string) error {
	if !TrustedHost(req.Host, publicURL) {
		return fmt.Errorf("the server runs with --insecure-dev, which lets requests without credentials in only when they are addressed to this machine, and this one is addressed to Host %q, which is not localhost, an IP address or the host of publicUrl (a web page can point a name of its own at this server): address the server as localhost or by its IP address, set publicUrl to the name its clients use, or send credentials (a topic key, the admin token)", clip.String(req.Host))
	}
	if err := crossOrigin.Check(req); err != nil {
		return fmt.Errorf("the server runs with --insecure-dev, which lets requests without credentials in only from this machine's own programs, and this %s comes from a web page of another site (%v): a page of another site cannot change this server; send credentials (a topic key, the admin token)", req.Method, err)
	}
	return nil
}

// TrustedHost reports whether host, a request's Host header with or without a port, names
// this server in a way no web page can take over: "localhost" (browsers resolve it to the
// loopback interface themselves), an IP address literal, or the host of publicURL.
func TrustedHost(host, publicURL string) bool {
	h := hostname(host)
	if h == "" {
		return false
	}
	if strings.EqualFold(h, "localhost") || net.ParseIP(h) != nil {
		return true
	}
	if publicURL == "" {
		return false
	}
	u, err := url.Parse(publicURL)
	return err == nil && u.Hostname() != "" && strings.EqualFold(strings.TrimSuffix(h, "."), strings.TrimSuffix(u.Hostname(), "."))
}

// hostname is host without its port and IPv6 brackets.
func hostname(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}

// BearerToken returns the token of req's Authorization: Bearer header, the credentials of the
// admin API, the console and /metrics; the scheme matches ignoring case, as HTTP's
// authentication schemes do (RFC 9110 §11.1).
func BearerToken(req *http.Request) (string, bool) {
	const scheme = "Bearer "
	authz := req.Header.Get("Authorization")
	if len(authz) < len(scheme) || !strings.EqualFold(authz[:len(scheme)], scheme) {
		return "", false
	}
	return authz[len(scheme):], true
}
