// Package httpapi serves a [router.Router] over HTTP: the data plane that publishers post
// events to (SPEC §1.1: classic and namespace publish, with topic keys or SAS tokens), the
// admin plane (SPEC §1.2: topics, event subscriptions, dead letters, with ARM-shaped bodies
// and a bearer token), the pull delivery routes of queue event subscriptions (receive,
// acknowledge, release, reject, renewLock; eventgrid-behaviour.md §9, with the topic's keys)
// and the validationUrl of manual endpoint validation (SPEC §2.5).
//
// The model: HTTP is a thin skin over the router's Go API. Every route reads the request,
// calls one exported method of package router and maps its answer — or its sentinel error —
// to a status and Event Grid's JSON error body. Nothing here keeps state of its own beyond
// the router's config (InsecureDev, AdminToken, PublicURL) read once in [New], the one
// switch [API.EndPolls] turns to end long polls when the server shuts down, and the
// admission of long polls and of request bodies to the server's bounds ([API.AdmitPolls],
// [API.AdmitBodies]), which a poll meets only once it is authenticated and about to wait, and
// a publish or settle only once it is authenticated and about to read its body.
//
// httpapi imports router, router/sas, router/devguard and schemas only; it uses router's exported API and
// nothing else, so an embedding program can serve the same planes, or its own, from it.
package httpapi
