package sinks

import (
	"context"
	"errors"
	"iter"
	"time"
)

// Errors an [ObjectStore] wraps, so callers can tell "not there" from "unavailable".
var (
	// ErrBucketNotFound: the bucket does not exist (and the store does not create buckets).
	ErrBucketNotFound = errors.New("bucket not found")
	// ErrObjectNotFound: the bucket has no object under that key.
	ErrObjectNotFound = errors.New("object not found")
	// ErrObjectTooLarge: the object is larger than the limit its reader gave Get.
	ErrObjectTooLarge = errors.New("object too large")
	// ErrRefused: the store answered and refused the request for what it is, not for a
	// passing fault: access to the bucket is denied or disabled (a policy, or a name the
	// server reserves), the bucket name is one it does not take, or the credentials are not
	// accepted ([ErrCredentialsRefused]). The same request fails the same way until an
	// operator changes the store's policy or egrid's configuration. The error says the
	// store's error code ([RefusalCode]).
	ErrRefused = errors.New("the store refused the request")
	// ErrCredentialsRefused: the store does not accept the credentials (an unknown access
	// key, a wrong secret key). It comes wrapped with [ErrRefused].
	ErrCredentialsRefused = errors.New("the store refused the credentials")
)

// Refusal is the error an [ObjectStore] wraps for a request the store refused ([ErrRefused]):
// Code is the store's error code (S3's, such as AccessDenied), Err its error. It matches
// ErrRefused with errors.Is, and ErrCredentialsRefused too when Credentials is set.
type Refusal struct {
	Code        string
	Credentials bool
	Err         error
}

func (e *Refusal) Error() string {
	what := ErrRefused.Error()
	if e.Credentials {
		what = ErrCredentialsRefused.Error()
	}
	return what + " (" + e.Code + "): " + e.Err.Error()
}

func (e *Refusal) Unwrap() error { return e.Err }

// Is makes a Refusal match ErrRefused, and ErrCredentialsRefused when Credentials is set.
func (e *Refusal) Is(target error) bool {
	return target == ErrRefused || e.Credentials && target == ErrCredentialsRefused
}

// RefusalCode returns the store's error code of a refused request ([ErrRefused]), or "" when
// err is not one.
func RefusalCode(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// ObjectStore keeps dead-letter objects (SPEC §5): the dead-letter actor writes one object per
// subscription per flush, and replay lists and reads them back. A listing answers a page at a
// time, as S3 does: a bucket of millions of objects is never described at once. sinks/blob implements it on
// MinIO; the test kit has an in-memory one and a fault-injecting wrapper, and all of them pass
// the testkit/sinktest conformance suite.
//
// Every method is safe for concurrent use. A cancelled or expired ctx makes a call return
// promptly with an error wrapping ctx.Err(); a Put that returns an error may or may not have
// written the object, so writers retry under the same key (a Put replaces the object). Put does
// not retain body. A nil error from Put means the object is stored and readable with Get and
// List. A missing bucket is an error wrapping [ErrBucketNotFound] unless the store is
// configured to create buckets, in which case Put creates it; Get of a missing key wraps
// [ErrObjectNotFound], Get of an object larger than its limit wraps [ErrObjectTooLarge]. A
// request the store refused for what it is (access denied, credentials not accepted) wraps
// [ErrRefused]. Any other error means the store could not be reached or failed the call:
// callers retry later.
type ObjectStore interface {
	// Put stores body under key in bucket, replacing any object there (content type and
	// metadata included), and describes the stored object.
	Put(ctx context.Context, bucket, key string, body []byte, opts PutOptions) (ObjectInfo, error)
	// List describes one page of the objects of bucket whose keys begin with q.Prefix and sort
	// after q.StartAfter, ordered by key: at most q.Max of them ([ListPage] when q.Max is 0 or
	// more than that). A page shorter than asked for is the last; the next page starts after the
	// key of the last object of this one ([ListAll] pages through).
	List(ctx context.Context, bucket string, q ListQuery) ([]ObjectInfo, error)
	// Get returns the content of the object under key in bucket, with its description. With
	// limit > 0 an object larger than limit bytes is refused with an error wrapping
	// [ErrObjectTooLarge] that names the object and its size, having read at most limit+1
	// bytes of it: a reader's memory is bounded by what it asks for.
	Get(ctx context.Context, bucket, key string, limit int64) ([]byte, ObjectInfo, error)
}

// ListQuery selects a page of [ObjectStore.List].
type ListQuery struct {
	// Prefix selects the keys that begin with it ("" for all).
	Prefix string
	// StartAfter, when set, selects the keys that sort after it (S3's start-after).
	StartAfter string
	// Max bounds the page (0 or more than [ListPage]: ListPage).
	Max int
}

// ListPage is the largest page [ObjectStore.List] answers: S3's 1 000 keys.
const ListPage = 1000

// PageSize returns the size of the page q asks for.
func (q ListQuery) PageSize() int {
	if q.Max <= 0 || q.Max > ListPage {
		return ListPage
	}
	return q.Max
}

// ListAll yields the objects of bucket that q selects, in key order, listing them a page at a
// time: it holds one page, however many objects there are. An error ends it (after being
// yielded once); so does the caller's leaving the loop, without listing further pages.
func ListAll(ctx context.Context, st ObjectStore, bucket string, q ListQuery) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		for {
			page, err := st.List(ctx, bucket, q)
			if err != nil {
				yield(ObjectInfo{}, err)
				return
			}
			for _, o := range page {
				if !yield(o, nil) {
					return
				}
			}
			if len(page) < q.PageSize() {
				return
			}
			q.StartAfter = page[len(page)-1].Key
		}
	}
}

// PutOptions describe the object [ObjectStore.Put] stores.
type PutOptions struct {
	// ContentType is the media type of the content.
	ContentType string
	// Metadata is user metadata stored with the object (S3's x-amz-meta-* headers): names of
	// lower-case ASCII letters, digits and '-', values of printable ASCII. Put does not retain
	// the map.
	Metadata map[string]string
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
	// Metadata is the user metadata given to Put, by lower-case name (nil when there is
	// none). Get returns it; List returns it where the server lists metadata (MinIO does;
	// other S3 servers list none, and then it is nil).
	Metadata map[string]string
}
