// Package probes serves the liveness and readiness endpoints Kubernetes probes expect:
// GET /healthz answers 200 "ok" while the process serves HTTP at all, and GET /readyz runs
// named readiness [Check]s and answers 200 when every one passes, else 503 with a body that
// names each failed check and what is wrong. Neither needs credentials, so they reveal nothing
// secret: a check's error names no file, path or address of the server ([Check]).
//
// A check is a function of a context that the handler bounds with a timeout, so a hung
// dependency makes the probe fail rather than hang. Checks run on the probe's request, never
// inside an actor.
//
// probes imports only the standard library.
package probes
