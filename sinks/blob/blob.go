package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
)

// Config says how to reach the MinIO server. Endpoint is required.
type Config struct {
	// Endpoint is host:port of the server, without a scheme (e.g. "127.0.0.1:9000").
	Endpoint string `json:"endpoint" yaml:"endpoint"`
	// AccessKey and SecretKey are the credentials (MinIO's root user and password, or an
	// access key with read and write rights on the dead-letter buckets).
	AccessKey string `json:"accessKey" yaml:"accessKey"`
	SecretKey string `json:"secretKey" yaml:"secretKey"`
	// Secure uses HTTPS.
	Secure bool `json:"secure,omitempty" yaml:"secure,omitempty"`
	// Region is the region buckets are created in (default: the server's).
	Region string `json:"region,omitempty" yaml:"region,omitempty"`
	// CreateBuckets creates a missing bucket on the first write to it.
	CreateBuckets bool `json:"createBuckets,omitempty" yaml:"createBuckets,omitempty"`
	// MaxRetries is how often minio-go tries one request; 0 means 1 (no retries of its own).
	MaxRetries int `json:"maxRetries,omitempty" yaml:"maxRetries,omitempty"`
	// ReadTimeout bounds one Get, its content included, and one page of a List (default
	// [DefaultReadTimeout]): a server that stalls or trickles in the middle of an object or a
	// listing fails the call, which its caller reports or tries again, instead of holding it
	// (and a list, show, replay or explain) for ever.
	ReadTimeout time.Duration `json:"readTimeout,omitempty" yaml:"readTimeout,omitempty"`
}

// DefaultReadTimeout is the default [Config.ReadTimeout]: a minute, as the dead-letter actor
// gives one object write, for an object of up to 80 MiB (about 1.4 MB/s at the least).
const DefaultReadTimeout = time.Minute

// Validate reports every problem of the config at once.
func (c Config) Validate() error {
	var errs []error
	switch {
	case c.Endpoint == "":
		errs = append(errs, errors.New("minio endpoint: required (host:port, e.g. 127.0.0.1:9000)"))
	case strings.Contains(c.Endpoint, "://"):
		errs = append(errs, fmt.Errorf("minio endpoint %q: give host:port without a scheme; use secure for HTTPS", clip.String(c.Endpoint)))
	case strings.Contains(c.Endpoint, "/"):
		errs = append(errs, fmt.Errorf("minio endpoint %q: give host:port only, without a path", clip.String(c.Endpoint)))
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		errs = append(errs, errors.New("minio access key and secret key: both are required"))
	}
	if c.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("minio maxRetries %d: use 0 or more", c.MaxRetries))
	}
	if c.ReadTimeout < 0 {
		errs = append(errs, fmt.Errorf("minio readTimeout %v: use a positive duration such as 1m (0 for the default, %v)", c.ReadTimeout, DefaultReadTimeout))
	}
	return errors.Join(errs...)
}

// Store is a [sinks.ObjectStore] on a MinIO server. It is safe for concurrent use.
type Store struct {
	cfg    Config
	client *minio.Client
	scheme string

	mu      sync.Mutex
	buckets map[string]bool // buckets known to exist
}

var _ sinks.ObjectStore = (*Store)(nil)

// New returns a store for the server cfg describes. It does not contact the server: a server
// that is down shows up as errors from the calls (and the dead-letter actor retries them).
// transport, when non-nil, carries the requests (tests; nil means minio-go's default).
func New(cfg Config, transport http.RoundTripper) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	retries := cfg.MaxRetries
	if retries == 0 {
		retries = 1
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    cfg.Secure,
		Region:    cfg.Region,
		Transport: transport,
		// Path-style URLs: bucket names need no DNS entries, and URL gives a usable link.
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   retries,
	})
	if err != nil {
		return nil, fmt.Errorf("configuring the minio client for %s: %w", cfg.Endpoint, err)
	}
	scheme := "http"
	if cfg.Secure {
		scheme = "https"
	}
	return &Store{cfg: cfg, client: client, scheme: scheme, buckets: make(map[string]bool)}, nil
}

// Endpoint returns the server's host:port.
func (s *Store) Endpoint() string { return s.cfg.Endpoint }

// Ping checks that the server answers and the credentials are accepted.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.client.ListBuckets(ctx); err != nil {
		err = translate(err)
		if errors.Is(err, sinks.ErrCredentialsRefused) {
			return fmt.Errorf("minio at %s answers but does not accept the credentials: %w", s.cfg.Endpoint, err)
		}
		return fmt.Errorf("reaching minio at %s: %w", s.cfg.Endpoint, err)
	}
	return nil
}

// url returns the path-style URL of an object.
func (s *Store) url(bucket, key string) string {
	return s.scheme + "://" + s.cfg.Endpoint + "/" + bucket + "/" + key
}

// Put implements [sinks.ObjectStore]. With CreateBuckets, a missing bucket is created first.
func (s *Store) Put(ctx context.Context, bucket, key string, body []byte, opts sinks.PutOptions) (sinks.ObjectInfo, error) {
	if err := s.ensureBucket(ctx, bucket); err != nil {
		return sinks.ObjectInfo{}, err
	}
	up, err := s.client.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{ContentType: opts.ContentType, UserMetadata: opts.Metadata})
	if err != nil {
		err = translate(err)
		if errors.Is(err, sinks.ErrBucketNotFound) {
			s.forget(bucket)
		}
		return sinks.ObjectInfo{}, fmt.Errorf("writing %s/%s to minio at %s: %w", bucket, key, s.cfg.Endpoint, err)
	}
	modified := up.LastModified
	if modified.IsZero() {
		modified = time.Now() // a PUT response carries no Last-Modified
	}
	return sinks.ObjectInfo{
		Bucket: bucket, Key: key, ETag: strings.Trim(up.ETag, `"`), Size: int64(len(body)),
		ContentType: opts.ContentType, LastModified: modified, URL: s.url(bucket, key), Metadata: userMetadata(opts.Metadata, ""),
	}, nil
}

func (s *Store) ensureBucket(ctx context.Context, bucket string) error {
	if !s.cfg.CreateBuckets {
		return nil
	}
	s.mu.Lock()
	known := s.buckets[bucket]
	s.mu.Unlock()
	if known {
		return nil
	}
	exists, err := s.client.BucketExists(ctx, bucket)
	if err != nil {
		return fmt.Errorf("checking bucket %s on minio at %s: %w", bucket, s.cfg.Endpoint, translate(err))
	}
	if !exists {
		err := s.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: s.cfg.Region})
		if code := minio.ToErrorResponse(err).Code; err != nil && code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
			return fmt.Errorf("creating bucket %s on minio at %s: %w", bucket, s.cfg.Endpoint, translate(err))
		}
	}
	s.mu.Lock()
	s.buckets[bucket] = true
	s.mu.Unlock()
	return nil
}

func (s *Store) forget(bucket string) {
	s.mu.Lock()
	delete(s.buckets, bucket)
	s.mu.Unlock()
}

// List implements [sinks.ObjectStore]: one ListObjectsV2 request of at most a page (more only
// when a server answers a short page that is not its last). It asks for the objects' user
// metadata, which MinIO lists (an extension of S3's ListObjectsV2); from another server
// Metadata stays nil.
//
// Like a Get, a page is bounded by [Config.ReadTimeout]: past it, the error says the server did
// not answer in time (and wraps [context.DeadlineExceeded]), so a listing of a stalled server
// fails instead of holding list, show, a replay or explain for as long as their callers wait.
func (s *Store) List(ctx context.Context, bucket string, q sinks.ListQuery) ([]sinks.ObjectInfo, error) {
	n := q.PageSize()
	timeout := s.readTimeout()
	lctx, cancel := context.WithTimeoutCause(ctx, timeout, errReadTimeout)
	defer cancel()
	fail := func(err error) error {
		if ctx.Err() == nil && context.Cause(lctx) == errReadTimeout {
			return fmt.Errorf("listing %s/%s* on minio at %s: the server did not answer within %v (minio readTimeout): "+
				"it is slow or stalled; check it, then try again: %w", bucket, q.Prefix, s.cfg.Endpoint, timeout, context.DeadlineExceeded)
		}
		return fmt.Errorf("listing %s/%s* on minio at %s: %w", bucket, q.Prefix, s.cfg.Endpoint, translate(err))
	}
	out := make([]sinks.ObjectInfo, 0, min(n, 64))
	opts := minio.ListObjectsOptions{Prefix: q.Prefix, StartAfter: q.StartAfter, MaxKeys: n, Recursive: true, WithMetadata: true}
	for o := range s.client.ListObjectsIter(lctx, bucket, opts) {
		if o.Err != nil {
			return nil, fail(o.Err)
		}
		out = append(out, sinks.ObjectInfo{
			Bucket: bucket, Key: o.Key, ETag: strings.Trim(o.ETag, `"`), Size: o.Size,
			ContentType: o.ContentType, LastModified: o.LastModified, URL: s.url(bucket, o.Key), Metadata: userMetadata(o.UserMetadata, "x-amz-meta-"),
		})
		if len(out) == n {
			break // the iterator asks for no further page
		}
	}
	if err := lctx.Err(); err != nil {
		return nil, fail(err)
	}
	slices.SortFunc(out, func(a, b sinks.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Get implements [sinks.ObjectStore]. With a limit, an object whose size is over it is
// refused before its content is read, and the content read is cut at limit+1 bytes in case
// the object is replaced meanwhile.
//
// The whole read is bounded by [Config.ReadTimeout]: past it, the error says the server did not
// answer in time (and wraps [context.DeadlineExceeded]).
func (s *Store) Get(ctx context.Context, bucket, key string, limit int64) ([]byte, sinks.ObjectInfo, error) {
	timeout := s.readTimeout()
	rctx, cancel := context.WithTimeoutCause(ctx, timeout, errReadTimeout)
	defer cancel()
	fail := func(err error) error {
		if ctx.Err() == nil && context.Cause(rctx) == errReadTimeout {
			return fmt.Errorf("reading %s/%s from minio at %s: the object was not read within %v (minio readTimeout): "+
				"the server is slow or stalled; check it, then try again: %w", bucket, key, s.cfg.Endpoint, timeout, context.DeadlineExceeded)
		}
		return fmt.Errorf("reading %s/%s from minio at %s: %w", bucket, key, s.cfg.Endpoint, translate(err))
	}
	obj, err := s.client.GetObject(rctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, sinks.ObjectInfo{}, fail(err)
	}
	defer obj.Close()
	st, err := obj.Stat()
	if err != nil {
		return nil, sinks.ObjectInfo{}, fail(err)
	}
	if limit > 0 && st.Size > limit {
		return nil, sinks.ObjectInfo{}, tooLarge(bucket, key, st.Size, limit)
	}
	var r io.Reader = obj
	if limit > 0 {
		r = io.LimitReader(obj, limit+1)
	}
	body, err := readAll(r, st.Size)
	if err != nil {
		return nil, sinks.ObjectInfo{}, fail(err)
	}
	if limit > 0 && int64(len(body)) > limit {
		return nil, sinks.ObjectInfo{}, tooLarge(bucket, key, int64(len(body)), limit)
	}
	return body, sinks.ObjectInfo{
		Bucket: bucket, Key: key, ETag: strings.Trim(st.ETag, `"`), Size: int64(len(body)),
		ContentType: st.ContentType, LastModified: st.LastModified, URL: s.url(bucket, key), Metadata: userMetadata(st.UserMetadata, ""),
	}, nil
}

// readTimeout is [Config.ReadTimeout], or its default.
func (s *Store) readTimeout() time.Duration {
	if s.cfg.ReadTimeout > 0 {
		return s.cfg.ReadTimeout
	}
	return DefaultReadTimeout
}

// readAll reads r to its end into a buffer sized for the size the server announced (at least
// as many bytes as read).
func readAll(r io.Reader, size int64) ([]byte, error) {
	var buf bytes.Buffer
	if size > 0 && size < 1<<31 {
		buf.Grow(int(size) + bytes.MinRead) // ReadFrom then sees the end without growing
	}
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// errReadTimeout is the cause of a Get's context ending at [Config.ReadTimeout].
var errReadTimeout = errors.New("minio read timeout")

func tooLarge(bucket, key string, size, limit int64) error {
	return fmt.Errorf("reading %s/%s: %w: it holds %d bytes, more than the %d bytes the reader takes", bucket, key, sinks.ErrObjectTooLarge, size, limit)
}

// userMetadata returns user metadata by lower-case name. A MinIO listing names it as sent,
// with prefix "x-amz-meta-", beside system metadata such as content-type, which is left out; a
// stat names it without the prefix (prefix "").
func userMetadata(m map[string]string, prefix string) map[string]string {
	var out map[string]string
	for k, v := range m {
		k = strings.ToLower(k)
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(m))
		}
		out[k[len(prefix):]] = v
	}
	return out
}

// translate maps MinIO's error codes to the sentinels of sinks, keeping the original error:
// a refusal ([sinks.ErrRefused]) keeps the S3 code, which MinIO's error text leaves out.
func translate(err error) error {
	switch code := minio.ToErrorResponse(err).Code; code {
	case "NoSuchBucket":
		return fmt.Errorf("%w (%w)", sinks.ErrBucketNotFound, err)
	case "NoSuchKey":
		return fmt.Errorf("%w (%w)", sinks.ErrObjectNotFound, err)
	case "InvalidAccessKeyId", "SignatureDoesNotMatch":
		return &sinks.Refusal{Code: code, Credentials: true, Err: err}
	case "AccessDenied", "AllAccessDisabled", "InvalidBucketName", "AccountProblem":
		// AllAccessDisabled is MinIO's answer for a bucket name it reserves ("minio").
		return &sinks.Refusal{Code: code, Err: err}
	}
	return err
}
