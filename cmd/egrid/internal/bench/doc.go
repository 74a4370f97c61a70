// Package bench is the load generator behind `egrid bench`: a table of scenarios, each
// measuring egrid against a baseline taken in the same run on the same machine (the same
// bodies posted straight to a sink, or into a minimal server that only reads and syncs them
// to disk), because shared machines drift and only same-run ratios mean something.
//
// Every server a scenario starts — the counting sink, the read+fsync baseline and the egrid
// router on a fresh disk store — listens on 127.0.0.1 only and is stopped before the scenario
// returns. A scenario is a row of [Scenarios]: its name, what it measures, its target and the
// function that runs it; `egrid bench` is a thin layer that parses flags and prints the
// [Result] rows with [WriteTable] or as JSON.
//
// [ClusterScenarios] (`egrid bench --cluster`) measure cluster mode the same way: three
// in-process NATS servers with JetStream clustered (so the binary carries nats-server, a
// module egrid's tests already use) and three routers as nodes on them, against raw
// JetStream publishes of the same events with the same replication.
//
// bench imports router, router/cluster, router/httpapi and the disk and JetStream stores;
// only cmd/egrid imports it.
package bench
