package sinks

import (
	"context"
	"errors"
	"time"
)

// Errors an [ObjectStore] wraps, so callers can tell "not there" from "unavailable".
var (
	// ErrBucketNotFound: the bucket does not exist (and the store does not create buckets).
	ErrBucketNotFound = errors.New("bucket not found")
	// ErrObjectNotFound: the bucket has no object under that key.
	ErrObjectNotFound = errors.New("object not found")
)

// ObjectStore keeps dead-letter objects (SPEC §5): the dead-letter actor writes one object per
// subscription per flush, and replay lists and reads them back. sinks/blob implements it on
// MinIO; the test kit has an in-memory one and a fault-injecting wrapper, and all of them pass
// the testkit/sinktest conformance suite.
//
// Every method is safe for concurrent use. A cancelled or expired ctx makes a call return
// promptly with an error wrapping ctx.Err(); a Put that returns an error may or may not have
// written the object, so writers retry under the same key (a Put replaces the object). Put does
// not retain body. A nil error from Put means the object is stored and readable with Get and
// List. A missing bucket is an error wrapping [ErrBucketNotFound] unless the store is
// configured to create buckets, in which case Put creates it; Get of a missing key wraps
// [ErrObjectNotFound]. Any other error means the store could not be reached or refused the
// call: callers retry later.
type ObjectStore interface {
	// Put stores body under key in bucket, replacing any object there, and describes the
	// stored object.
	Put(ctx context.Context, bucket, key string, body []byte, contentType string) (ObjectInfo, error)
	// List describes the objects of bucket whose keys begin with prefix, ordered by key.
	List(ctx context.Context, bucket, prefix string) ([]ObjectInfo, error)
	// Get returns the content of the object under key in bucket, with its description.
	Get(ctx context.Context, bucket, key string) ([]byte, ObjectInfo, error)
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Bucket, Key string
	// ETag is the store's entity tag of the content (without quotes).
	ETag string
	// Size is the content length in bytes.
	Size int64
	// ContentType is the media type given to Put (List may leave it empty).
	ContentType string
	// LastModified is when the object was written.
	LastModified time.Time
	// URL locates the object (http(s)://endpoint/bucket/key for MinIO).
	URL string
}
