// Package testkit is the harness users write actor-level tests of egrid with. [Run] starts a
// router inside a testing/synctest bubble, so time is virtual: a 24-hour retry schedule runs in
// milliseconds, [Harness.Advance] moves the clock, and [Harness.Settle] waits until everything
// has happened that can happen without the clock moving.
//
// Destinations are scripted in-memory HTTP endpoints ([Harness.Endpoint]): the router's real
// webhook sink posts to them through an in-memory http.RoundTripper ([Transport]), and each
// records every attempt with its virtual time, headers and body. Dead letters land in an
// in-memory box per subscription. Probes ([Harness.Probe], [Expect]) test single actors.
//
// For integration tests outside a bubble, [StartMinIO] starts a real MinIO server,
// [StartNATSCluster] a cluster of in-process NATS servers with JetStream (killable and
// restartable one by one), and [StartCluster] several egrid routers as nodes of one cluster
// on it, so a test can kill a node and watch its subscriptions fail over.
//
// testkit may import every egrid package; only tests and examples import testkit.
package testkit
