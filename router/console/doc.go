// Package console serves egrid's web console at /console/: an operator's view of topics and
// their publish rates, subscriptions with their delivery state (backlog, in flight, oldest
// age, probation, with a button that ends a probation), a subscription's recent delivery
// attempts, the explanation of one event's delivery, dead letters with a replay and its
// progress, and sparklines of the counters.
//
// The model: the page is static — HTML, CSS and plain JavaScript embedded with embed.FS, no
// build step — and it reads everything through the admin HTTP API (package router/httpapi),
// sending the admin token as a bearer header that the operator typed into its login form and
// that the page keeps in the tab's sessionStorage only. The console itself serves the assets
// and two read-only JSON routes the admin API lacks: recent attempts, which an [Attempts]
// ring keeps from [router.Deps.OnAttempt], and a snapshot of the router's counters. Both
// take the same bearer token as the admin API, and neither holds a secret: attempts carry
// ids, statuses and decisions only, never an endpoint or a header. Because the token travels
// only in an Authorization header that the page's own script sets, a cross-site request
// carries no credential (no cookie, so no CSRF); a strict Content-Security-Policy keeps
// foreign scripts out of the page that holds it.
//
// console imports router and router/metrics only, and only their exported API.
package console
