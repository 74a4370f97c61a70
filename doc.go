// Package egrid is the root of the egrid module: a self-hosted event router with Azure Event
// Grid's push-delivery semantics. The code lives in the subpackages — router (the embeddable
// API), actors (the runtime), schemas, sinks, testkit and cmd/egrid — and this package holds
// only the test that keeps their imports pointing the way DESIGN.md §2 draws them.
package egrid
