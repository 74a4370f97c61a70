// Package promexport exposes a [metrics.Set] as a prometheus.Collector, under Event Grid's
// metric names in Prometheus form (PublishSuccessCount is egrid_publish_success_count).
//
// The model: egrid's actors and ingress count into the Set as they always do (atomic adds,
// histogram observations, gauges the actors store at the end of each turn), and the collector
// reads the Set only when Prometheus scrapes. A scrape never asks an actor anything and never
// waits on one; it adds nothing to the paths that publish and deliver events.
//
// A host service that embeds egrid registers router.Router.Collector in its own registry;
// `egrid serve` registers it with the Go and process collectors and serves GET /metrics.
//
// promexport imports only router/metrics.
package promexport
