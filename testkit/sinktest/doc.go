// Package sinktest holds conformance suites for egrid's delivery contracts: every
// implementation of a contract — the real one and the test kit's fakes — runs the same suite,
// so a fake can stand in for the real thing.
//
//   - [RunSink] checks a [sinks.Sink] (webhooks, Go functions, broker publishers).
//   - [ObjectStore] checks a [sinks.ObjectStore]: the MinIO store of sinks/blob and the test
//     kit's in-memory and fault-injecting stores.
//
// sinktest imports schemas and sinks; only tests import it.
package sinktest
