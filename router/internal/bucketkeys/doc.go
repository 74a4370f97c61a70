// Package bucketkeys lists the keys a JetStream key-value bucket's stream holds, which the
// JetStream store's listings and the cluster's membership listing read after a key watch,
// and reads such a watch's initial values (InitialValues). The watch's end marker can come
// before every key was delivered (nats-io/nats-server#4824), or never (a key it counted
// purged or expired before it was delivered: the wait then ends after WatchIdle without a
// value); each key the stream holds that the watch left out is then read with a get.
//
// bucketkeys imports no egrid package (only the NATS client), so the JetStream store and the
// cluster, which import nothing of each other, both use it.
package bucketkeys
