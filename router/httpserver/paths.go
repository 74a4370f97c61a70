package httpserver

import (
	"net/http"
	"path"

	"github.com/egridio/egrid/schemas/clip"
)

// PlainPaths answers a request whose path is not in its plain form — with an empty segment
// ("//topics/t/api/events"), or a "." or ".." segment — 404 Not Found with Event Grid's
// error body naming the plain form, instead of passing it to h. Go's ServeMux would answer it
// 307 with a plain-text body and the plain form in Location: egrid's API never redirects
// (README, Data plane), every error it answers has Event Grid's JSON shape, and a client that
// follows redirects would send a publish's body again to a URL it did not ask for. CONNECT
// requests, whose target is not a path, pass through. Segments are those of the path as sent:
// a "/" sent percent-encoded (%2F, an event id "https://example.com/1" in an explain route)
// separates none.
//
// The request line "PRI * HTTP/2.0" is the start of an HTTP/2 connection without TLS (h2c,
// "prior knowledge"), which egrid does not serve: it is answered 505 HTTP Version Not
// Supported saying so, and the connection closed, where its "*" target would otherwise read
// as a path to send as "/*" (Go's ServeMux answers any "*" target 400 without a reason).
func PlainPaths(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			h.ServeHTTP(w, r)
			return
		}
		if r.Method == "PRI" && r.RequestURI == "*" && r.ProtoMajor == 2 {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusHTTPVersionNotSupported, "HTTPVersionNotSupported", h2cRefused)
			return
		}
		// The path as sent, percent-encoding kept, as ServeMux cleans it: an event id in an
		// explain route may hold "//" or "../" sent as %2F, which is no segment.
		sent := r.URL.EscapedPath()
		if p := plainPath(sent); p != sent {
			writeError(w, http.StatusNotFound, "NotFound", "no route for "+clip.String(sent)+": the path has an empty, \".\" or \"..\" segment; send "+clip.String(p))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// plainPath is p as Go's ServeMux routes it: rooted, cleaned of empty, "." and ".."
// segments, and keeping a trailing slash.
func plainPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// h2cRefused is the answer to an HTTP/2 connection preface sent without TLS.
const h2cRefused = "HTTP/2 without TLS (h2c, prior knowledge) is not served: send HTTP/1.1, or HTTP/2 over TLS (serve with --tls-cert and --tls-key, and connect with https://)"
