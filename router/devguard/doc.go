// Package devguard keeps what --insecure-dev opens to the developer's own machine.
//
// The model: a server run with InsecureDev ([router.Config]) lets requests in without
// credentials — publishes and pull operations without a topic key, admin calls without a
// token when none is configured — because only the developer's machine can reach its
// loopback address. A web browser on that machine can, though, on behalf of any page it
// shows: a page may post to http://localhost:8080 from another site (cross-site request
// forgery: a publish, an endProbation, a replay of dead letters), or point a name of its own
// at 127.0.0.1 once the browser has loaded it (DNS rebinding) and then read and write the
// admin API as if it were the page's own site: list the topic keys, create an event
// subscription delivering every event to an endpoint of its choice.
//
// [Check] refuses both for a request about to be let in without credentials: one whose Host
// is not localhost, an IP address or the host of the configured public URL (a rebound name
// is none of them), and a browser's cross-origin request that is not a safe method
// ([http.CrossOriginProtection]: Sec-Fetch-Site, or Origin against Host). Requests that carry
// credentials are not its business: a page can neither know them nor, cross-origin, send
// the headers that carry them.
//
// devguard is pure: it imports no egrid package and reads nothing but the request.
package devguard
