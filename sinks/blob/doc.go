// Package blob is egrid's dead-letter object store on MinIO (or any S3-compatible server),
// built on minio-go: a [Store] implements [sinks.ObjectStore], which the dead-letter actor
// writes dead-letter objects through and replay reads them back with (SPEC §5).
//
// A subscription's deadLetterDestination names a blob container (Event Grid's ARM shape:
// endpointType StorageBlob, properties.blobContainerName); in egrid that container is a MinIO
// bucket. With [Config.CreateBuckets] a missing bucket is created on the first write; otherwise
// writing to it fails with [sinks.ErrBucketNotFound] and the dead-letter actor retries for up to
// four hours, so an operator can still create it.
//
// Objects carry user metadata ([sinks.PutOptions]); List asks MinIO to list it (an extension
// of S3's listing), so a reader can tell objects apart without reading them. Get takes a limit
// and refuses a larger object before reading it; a whole Get, content included, is bounded by
// [Config.ReadTimeout], so a server that stalls mid-object fails the read instead of holding it.
//
// The store does no retrying of its own (minio-go's retries are turned off by default): the
// dead-letter actor owns the back-off schedule, and replay reports failures at once.
//
// blob imports only sinks.
package blob
