package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/blob"
)

// minioFileConfig is `server.minio` in the YAML config: where dead letters are written.
type minioFileConfig struct {
	Endpoint  string `yaml:"endpoint"`
	AccessKey string `yaml:"accessKey"`
	SecretKey string `yaml:"secretKey"`
	Secure    bool   `yaml:"secure"`
	Region    string `yaml:"region"`
	// CreateBuckets creates a subscription's bucket on its first dead letter (default true).
	CreateBuckets *bool `yaml:"createBuckets"`
	// SecretKeyFile is a file holding the secret key, instead of SecretKey.
	SecretKeyFile string `yaml:"secretKeyFile"`
	// ReadTimeout bounds one read of a dead-letter object, and one page of a listing (default
	// 1m).
	ReadTimeout time.Duration `yaml:"readTimeout"`
}

// deadLetterSettings are the resolved dead-letter settings of `egrid serve`.
type deadLetterSettings struct {
	// MinIO is the dead-letter store; Endpoint is empty when none is configured.
	MinIO blob.Config
	// Delay is the dead-letter delay (0: the router's default, 5 min).
	Delay time.Duration
	// secretKeyFile is the file MinIO.SecretKey was read from (zero: none).
	secretKeyFile secretFile
}

// deadLetterFlags are serve's dead-letter flags.
func deadLetterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "minio-endpoint", Usage: "MinIO host:port dead letters are written to; without it, event subscriptions with a deadLetterDestination are refused (env EGRID_MINIO_ENDPOINT)"},
		&cli.StringFlag{Name: "minio-access-key", Usage: "MinIO access key (env EGRID_MINIO_ACCESS_KEY)"},
		&cli.StringFlag{Name: "minio-secret-key", Usage: "MinIO secret key (env EGRID_MINIO_SECRET_KEY)"},
		&cli.BoolFlag{Name: "minio-secure", Usage: "reach MinIO over HTTPS (env EGRID_MINIO_SECURE)"},
		// Unset, the environment or the file decides, and then the router's default.
		&cli.DurationFlag{Name: "dead-letter-delay", Usage: "how long a dead letter waits after its last attempt before it is written, divided by --time-scale (env EGRID_DEAD_LETTER_DELAY)", DefaultText: router.DefaultDeadLetterDelay.String()},
	}
}

// resolveDeadLetters merges the dead-letter flags, environment and file settings (flag > env >
// file > default), reporting every problem at once.
func resolveDeadLetters(c *cli.Context, getenv func(string) string, fs serverConfig) (deadLetterSettings, []error) {
	var errs []error
	str := func(flag, envName, fileVal string) string {
		switch {
		case c.IsSet(flag):
			return c.String(flag)
		case getenv(envName) != "":
			return getenv(envName)
		}
		return fileVal
	}
	m := fs.MinIO
	s := deadLetterSettings{MinIO: blob.Config{
		Endpoint:      str("minio-endpoint", "EGRID_MINIO_ENDPOINT", m.Endpoint),
		AccessKey:     str("minio-access-key", "EGRID_MINIO_ACCESS_KEY", m.AccessKey),
		Region:        m.Region,
		Secure:        m.Secure,
		CreateBuckets: m.CreateBuckets == nil || *m.CreateBuckets,
		ReadTimeout:   m.ReadTimeout,
	}}
	secret, secretKeyFile, err := resolveSecret(c, getenv, secretSource{
		flag: "minio-secret-key", fileFlag: "minio-secret-key-file", env: "EGRID_MINIO_SECRET_KEY", fileEnv: "EGRID_MINIO_SECRET_KEY_FILE",
		key: "server.minio.secretKey", fileKey: "server.minio.secretKeyFile", fileVal: m.SecretKey, filePath: m.SecretKeyFile,
	})
	if err != nil {
		errs = append(errs, err)
	}
	s.MinIO.SecretKey, s.secretKeyFile = secret, secretKeyFile
	switch {
	case c.IsSet("minio-secure"):
		s.MinIO.Secure = c.Bool("minio-secure")
	case getenv("EGRID_MINIO_SECURE") != "":
		v, err := strconv.ParseBool(getenv("EGRID_MINIO_SECURE"))
		if err != nil {
			errs = append(errs, fmt.Errorf("EGRID_MINIO_SECURE=%q: use true or false", clip.String(getenv("EGRID_MINIO_SECURE"))))
		}
		s.MinIO.Secure = v
	}
	switch {
	case c.IsSet("dead-letter-delay"):
		s.Delay = c.Duration("dead-letter-delay")
	case getenv("EGRID_DEAD_LETTER_DELAY") != "":
		v, err := time.ParseDuration(getenv("EGRID_DEAD_LETTER_DELAY"))
		if err != nil {
			errs = append(errs, fmt.Errorf("EGRID_DEAD_LETTER_DELAY=%q: use a duration such as 5m", clip.String(getenv("EGRID_DEAD_LETTER_DELAY"))))
		}
		s.Delay = v
	default:
		s.Delay = fs.DeadLetterDelay
	}
	if s.Delay < 0 {
		errs = append(errs, fmt.Errorf("dead-letter delay %v: use a positive duration such as 5m", s.Delay))
	}
	if s.MinIO.Endpoint != "" {
		if err := s.MinIO.Validate(); err != nil {
			errs = append(errs, err)
		}
	} else if s.MinIO.AccessKey != "" || s.MinIO.SecretKey != "" {
		errs = append(errs, errors.New("minio access key given without an endpoint: set --minio-endpoint (or server.minio.endpoint)"))
	}
	return s, errs
}

// deadLetterStore opens the MinIO store of the settings, or returns nil when none is
// configured. An unreachable server is only a warning: the dead-letter actor retries.
func deadLetterStore(ctx context.Context, s deadLetterSettings, log *slog.Logger) (sinks.ObjectStore, error) {
	if s.MinIO.Endpoint == "" {
		log.Info("no dead-letter store: event subscriptions with a deadLetterDestination are refused (use --minio-endpoint)")
		return nil, nil
	}
	st, err := blob.New(s.MinIO, nil)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := st.Ping(pctx); err != nil {
		msg := "MinIO is not reachable yet; dead letters wait and are retried"
		if errors.Is(err, sinks.ErrCredentialsRefused) {
			msg = router.MinIOCredentialsHint + "; dead letters wait and are retried"
		}
		log.Warn(msg, "endpoint", s.MinIO.Endpoint, "err", err)
		return st, nil
	}
	log.Info("dead letters are written to MinIO", "endpoint", s.MinIO.Endpoint, "createBuckets", s.MinIO.CreateBuckets)
	return st, nil
}

// acceptingStore stands in for MinIO in `egrid validate`'s throwaway router, so declared
// deadLetterDestinations are checked as serve (given --minio-endpoint) would check them.
type acceptingStore struct{}

func (acceptingStore) Put(_ context.Context, bucket, key string, body []byte, opts sinks.PutOptions) (sinks.ObjectInfo, error) {
	return sinks.ObjectInfo{Bucket: bucket, Key: key, Size: int64(len(body)), ContentType: opts.ContentType}, nil
}
func (acceptingStore) List(context.Context, string, sinks.ListQuery) ([]sinks.ObjectInfo, error) {
	return nil, nil
}
func (acceptingStore) Get(_ context.Context, bucket, key string, _ int64) ([]byte, sinks.ObjectInfo, error) {
	return nil, sinks.ObjectInfo{}, fmt.Errorf("%s/%s: %w", bucket, key, sinks.ErrObjectNotFound)
}

// deadletterCommand is `egrid deadletter list|show|replay|status`.
func deadletterCommand(e env) *cli.Command {
	topicFlag := &cli.StringFlag{Name: "topic", Usage: "topic name", Required: true}
	subFlag := &cli.StringFlag{Name: "subscription", Aliases: []string{"s"}, Usage: "event subscription name", Required: true}
	rangeFlags := []cli.Flag{
		&cli.StringFlag{Name: "since", Usage: "only objects written at or after this time: RFC 3339 (2026-01-02T15:04:05Z) or a duration ago (2h)"},
		&cli.StringFlag{Name: "until", Usage: "only objects written before this time: RFC 3339 or a duration ago"},
	}
	reasonFlag := &cli.StringFlag{Name: "reason", Usage: "only records with this deadLetterReason (e.g. MaxDeliveryAttemptsExceeded)"}
	return &cli.Command{
		Name:  "deadletter",
		Usage: "read and replay an event subscription's dead letters (objects in MinIO)",
		Description: `Dead-lettered events are written to the subscription's bucket (deadLetterDestination) as
objects <SUBSCRIPTION>/<YYYY>/<M>/<D>/<H>/<uuid>.json, each a JSON array of records.

Examples:
   egrid deadletter list --topic orders --subscription billing --since 24h
   egrid deadletter show --topic orders --subscription billing --reason UndeliverableDueToHttpBadRequest
   egrid deadletter replay --topic orders --subscription billing --since 2h --dry-run
   egrid deadletter replay --topic orders --subscription billing --since 2h`,
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list a subscription's dead-letter objects",
				Description: `Lists the objects oldest first, at most --limit of them (default 1000): it then says
how many more there are, and the --since and --after that list them (-o json prints the
server's answer: the objects in value, the continuation in more). The server holds a page of
MinIO's listing at a time, not the whole of it.`,
				Flags: append(append(serverFlags(), topicFlag, subFlag, outputFlag(),
					&cli.IntFlag{Name: "limit", Value: router.DefaultDeadLetterLimit, Usage: "list at most this many objects"},
					&cli.StringFlag{Name: "after", Usage: "with --since: leave out the objects written at --since whose keys are not after this one (a previous list's continuation)"}), rangeFlags...),
				Action: func(c *cli.Context) error {
					sel, err := selection(c)
					if err != nil {
						return err
					}
					if c.Int("limit") <= 0 {
						return cli.Exit(fmt.Sprintf("--limit %d: use a positive number of objects such as %d", c.Int("limit"), router.DefaultDeadLetterLimit), 2)
					}
					sel.limit = c.Int("limit")
					if sel.after = c.String("after"); sel.after != "" && sel.since.IsZero() {
						return cli.Exit("--after: give it with --since, both as a previous list printed them", 2)
					}
					var raw json.RawMessage
					if err := newClient(c, e).do(http.MethodGet, deadLetterPath(c, "")+sel.query(), nil, &raw); err != nil {
						return err
					}
					if c.String("output") == "json" {
						// The server's answer: value, and more (the continuation) when it was full.
						return printJSON(e.Stdout, raw)
					}
					var out struct {
						Value []struct {
							Key          string    `json:"key"`
							Size         int64     `json:"size"`
							LastModified time.Time `json:"lastModified"`
						} `json:"value"`
						More *httpapi.DeadLetterObjectsMoreView `json:"more"`
					}
					if err := json.Unmarshal(raw, &out); err != nil {
						return cli.Exit(fmt.Sprintf("the server's answer is not a list of dead-letter objects: %v", err), 1)
					}
					more := func(w io.Writer) {
						if m := out.More; m != nil {
							fmt.Fprintf(w, "%d more objects; --since %s --after %s lists them\n", m.Objects, m.Since.UTC().Format(time.RFC3339Nano), termSafe(m.After))
						}
					}
					tab := newTable("WRITTEN", "SIZE", "KEY")
					for _, o := range out.Value {
						tab.row(o.LastModified.UTC().Format(time.RFC3339), strconv.FormatInt(o.Size, 10), o.Key)
					}
					if err := tab.write(e.Stdout); err != nil {
						return err
					}
					fmt.Fprintf(e.Stdout, "%d objects\n", len(out.Value))
					more(e.Stdout)
					return nil
				},
			},
			{
				Name:  "show",
				Usage: "show dead-letter records: one object (--key) or every object in a range",
				Description: `Reads the objects oldest first, one at a time, and shows their records (--reason
selects some). It stops at --limit records (default 1000), or once their events take 64 MiB,
and reads no further object: it then says how many records and objects it left, and the
--since, --after and --offset that take up with the next record (inside an object too). Narrow
the range (--since, --until, --key, --reason) or raise --limit to see the rest. -o json prints
the server's answer: the records in value, the continuation in more.`,
				Flags: append(append(serverFlags(), topicFlag, subFlag, outputFlag(), reasonFlag,
					&cli.StringFlag{Name: "key", Usage: "the object's key (from deadletter list)"},
					&cli.StringFlag{Name: "after", Usage: "with --since: leave out the objects written at --since whose keys are not after this one (a previous show's continuation)"},
					&cli.IntFlag{Name: "offset", Usage: "leave out the first this many records selected (from --since and --after on: a previous show's continuation)"},
					&cli.IntFlag{Name: "limit", Value: router.DefaultDeadLetterLimit, Usage: "show at most this many records; the server reads no object past them"}), rangeFlags...),
				Action: func(c *cli.Context) error {
					sel, err := selection(c)
					if err != nil {
						return err
					}
					if c.Int("limit") <= 0 {
						return cli.Exit(fmt.Sprintf("--limit %d: use a positive number of records such as %d", c.Int("limit"), router.DefaultDeadLetterLimit), 2)
					}
					sel.limit = c.Int("limit")
					if sel.after = c.String("after"); sel.after != "" && sel.since.IsZero() {
						return cli.Exit("--after: give it with --since, both as a previous show printed them", 2)
					}
					if sel.offset = c.Int("offset"); sel.offset < 0 {
						return cli.Exit(fmt.Sprintf("--offset %d: use 0 or more records, as a previous show printed it", sel.offset), 2)
					}
					var raw json.RawMessage
					if err := newClient(c, e).do(http.MethodGet, deadLetterPath(c, "/records")+sel.query(), nil, &raw); err != nil {
						return err
					}
					var out struct {
						Objects  int                            `json:"objects"`
						Value    []httpapi.DeadLetterRecordView `json:"value"`
						Problems []string                       `json:"problems"`
						Unlisted int                            `json:"unlistedProblems"`
						More     *httpapi.DeadLetterMoreView    `json:"more"`
					}
					if err := json.Unmarshal(raw, &out); err != nil {
						return cli.Exit(fmt.Sprintf("the server's answer is not a list of dead-letter records: %v", err), 1)
					}
					for _, pr := range out.Problems {
						fmt.Fprintln(e.Stderr, "warning: not readable:", termSafe(pr))
					}
					if out.Unlisted > 0 {
						fmt.Fprintf(e.Stderr, "warning: %d more objects or records not readable (not listed)\n", out.Unlisted)
					}
					if c.String("output") == "json" {
						// The server's answer: objects, value, problems, and more (the
						// continuation) when it was full.
						return printJSON(e.Stdout, raw)
					}
					more := func(w io.Writer) {
						m := out.More
						if m == nil {
							return
						}
						fmt.Fprintf(w, "%d more records of the last object and %d more objects not read; narrow the range (--since, --until, --key, --reason) or raise --limit; ",
							m.Records, m.Objects)
						next := "--since " + m.Since.UTC().Format(time.RFC3339Nano)
						if m.After == "" && m.Offset == 0 { // also an older server's, which gives no more
							fmt.Fprintf(w, "%s takes up from the first object not wholly shown\n", next)
							return
						}
						if m.After != "" {
							next += " --after " + termSafe(m.After)
						}
						if m.Offset > 0 {
							next += " --offset " + strconv.Itoa(m.Offset)
						}
						if sel.key != "" {
							next += " --key " + termSafe(sel.key)
						}
						if sel.reason != "" {
							next += " --reason " + sel.reason
						}
						fmt.Fprintf(w, "%s takes up with the next record\n", next)
					}
					tab := newTable("ID", "REASON", "ATTEMPTS", "LAST OUTCOME", "STATUS", "OBJECT")
					for _, r := range out.Value {
						status := "-"
						if r.LastHTTPStatusCode != 0 {
							status = strconv.Itoa(r.LastHTTPStatusCode)
						}
						tab.row(r.ID, r.DeadLetterReason, strconv.Itoa(r.DeliveryAttempts), r.LastDeliveryOutcome, status, r.Object)
					}
					if err := tab.write(e.Stdout); err != nil {
						return err
					}
					fmt.Fprintf(e.Stdout, "%d records in %d objects\n", len(out.Value), out.Objects)
					more(e.Stdout)
					return nil
				},
			},
			{
				Name:  "replay",
				Usage: "re-deliver dead-lettered events to this one subscription (fresh attempts, same event ids)",
				Description: `Reads the subscription's dead-letter objects (in --since/--until), selects the records
(--reason), and re-delivers each event once to this subscription only, as a new publish with a
fresh attempt budget and its original id. Events that fail again are dead-lettered again. The
objects are not changed. By default the command waits until every event is delivered or
dead-lettered again, with a progress bar; --no-wait returns once the replay has started.
--dry-run prints what would be replayed and changes nothing.

The server reads the objects one at a time, newest first, and keeps only what it selected of
each; it reads an object's events again when the replay comes to it, once the events of newer
objects it holds take less than 64 MiB. A replay of any number of objects holds about that
much, and events of older objects wait while newer ones keep failing. The summary (and
--dry-run's list) names the first 10 000 events and counts the others.

While a replay runs the server sends a heartbeat every 15 s when it has nothing else to say,
so however long the replay takes, the command gives up once nothing came for --idle-timeout
(default 1m): a stalled server or connection. The replay may then still be running in the
server: ` + "`egrid deadletter status`" + ` lists the replays running there. --dry-run and
--no-wait also give up after 2 minutes in all, as every other command does.`,
				Flags: append(append(serverFlags(), topicFlag, subFlag, outputFlag(), reasonFlag,
					&cli.BoolFlag{Name: "dry-run", Usage: "print what would be replayed; re-deliver nothing"},
					&cli.BoolFlag{Name: "no-wait", Usage: "return once the replay has started"},
					&cli.DurationFlag{Name: "idle-timeout", Value: defaultReplayIdleTimeout, Usage: "give up waiting once nothing came from the server for this long (it sends a heartbeat every " + httpapi.ReplayHeartbeat.String() + " while a replay runs)"}), rangeFlags...),
				Action: func(c *cli.Context) error { return replay(c, e) },
			},
			{
				Name:  "status",
				Usage: "show the dead-letter outbox (records waiting, being written, retrying; written and dropped) and the replays running",
				Flags: append(serverFlags(), outputFlag()),
				Action: func(c *cli.Context) error {
					var st map[string]any
					if err := newClient(c, e).do(http.MethodGet, "/admin/deadLetters", nil, &st); err != nil {
						return err
					}
					if c.String("output") == "json" {
						return printJSON(e.Stdout, st)
					}
					if loading, _ := st["loading"].(bool); loading {
						// The counts of records are not known before the outbox is read.
						fmt.Fprintf(e.Stdout, "loading the outbox since %s\n", termSafe(fmt.Sprint(st["loadingSince"])))
					} else {
						n := func(k string) int { f, _ := st[k].(float64); return int(f) }
						fmt.Fprintf(e.Stdout, "waiting %d  writing %d  retrying %d  objects written %d  records written %d  dropped %d\n",
							n("waiting"), n("writing"), n("retrying"), n("objectsWritten"), n("recordsWritten"), n("recordsDropped"))
					}
					return printRunningReplays(e, st["replays"])
				},
			},
		},
	}
}

// printRunningReplays prints the replays of a dead-letter status answer (none from an older
// server, which does not list them).
func printRunningReplays(e env, replays any) error {
	list, _ := replays.([]any)
	if len(list) == 0 {
		if replays != nil {
			fmt.Fprintln(e.Stdout, "no replay running")
		}
		return nil
	}
	tab := newTable("TOPIC", "SUBSCRIPTION", "STARTED", "SETTLED")
	for _, v := range list {
		rp, _ := v.(map[string]any)
		n := func(k string) int { f, _ := rp[k].(float64); return int(f) }
		tab.row(fmt.Sprint(rp["topic"]), fmt.Sprint(rp["subscription"]), fmt.Sprint(rp["started"]), fmt.Sprintf("%d of %d events", n("settled"), n("events")))
	}
	fmt.Fprintf(e.Stdout, "%d replays running:\n", len(list))
	return tab.write(e.Stdout)
}

// deadLetterPath is the admin path of the subscription's dead letters, plus tail.
func deadLetterPath(c *cli.Context, tail string) string {
	return subscriptionPath(c.String("topic"), c.String("subscription")) + "/deadLetters" + tail
}

// deadLetterSelection is what the --since, --until, --reason, --key, (list's and show's)
// --after, (show's) --offset and (list's and show's) --limit flags select.
type deadLetterSelection struct {
	since, until time.Time
	reason, key  string
	after        string
	offset       int
	limit        int
}

// selection reads and checks the selection flags the command has.
func selection(c *cli.Context) (deadLetterSelection, error) {
	var sel deadLetterSelection
	var errs []string
	now := time.Now()
	for name, dst := range map[string]*time.Time{"since": &sel.since, "until": &sel.until} {
		if v := c.String(name); v != "" {
			t, err := parseWhen(now, v)
			if err != nil {
				errs = append(errs, fmt.Sprintf("--%s: %v", name, err))
			}
			*dst = t
		}
	}
	if v := c.String("reason"); v != "" {
		r, err := schemas.ParseReason(v)
		if err != nil {
			errs = append(errs, "--reason: "+err.Error())
		}
		sel.reason = string(r)
	}
	sel.key = c.String("key")
	if !sel.since.IsZero() && !sel.until.IsZero() && sel.since.After(sel.until) {
		errs = append(errs, fmt.Sprintf("--since %s is later than --until %s, which selects nothing: give the earlier time as --since",
			sel.since.UTC().Format(time.RFC3339Nano), sel.until.UTC().Format(time.RFC3339Nano)))
	}
	if len(errs) > 0 {
		return sel, cli.Exit(strings.Join(errs, "\n"), 2)
	}
	return sel, nil
}

// query renders the selection as a query string ("" or "?...").
func (s deadLetterSelection) query() string {
	q := url.Values{}
	if !s.since.IsZero() {
		q.Set("since", s.since.UTC().Format(time.RFC3339Nano))
	}
	if !s.until.IsZero() {
		q.Set("until", s.until.UTC().Format(time.RFC3339Nano))
	}
	if s.reason != "" {
		q.Set("reason", s.reason)
	}
	if s.key != "" {
		q.Set("key", s.key)
	}
	if s.after != "" {
		q.Set("after", s.after)
	}
	if s.offset > 0 {
		q.Set("offset", strconv.Itoa(s.offset))
	}
	if s.limit > 0 {
		q.Set("limit", strconv.Itoa(s.limit))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// parseWhen parses an RFC 3339 time or a duration before now ("90m", "2h").
func parseWhen(now time.Time, v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a duration ago (2h)", clip.String(v))
}

// replay runs `egrid deadletter replay`: it streams the server's progress into a progress bar
// and prints the summary. It gives up once nothing came from the server for --idle-timeout
// (see [replayWatch]).
func replay(c *cli.Context, e env) error {
	sel, err := selection(c)
	if err != nil {
		return err
	}
	idle := c.Duration("idle-timeout")
	if idle <= 0 {
		return cli.Exit(fmt.Sprintf("--idle-timeout %v: use a positive duration such as %v", idle, defaultReplayIdleTimeout), 2)
	}
	body := httpapi.ReplayRequest{Since: sel.since, Until: sel.until, Reason: sel.reason, DryRun: c.Bool("dry-run"), Wait: !c.Bool("no-wait")}
	cl := newClient(c, e)
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(c.Context)
	defer cancel(nil)
	watch := newReplayWatch(idle, cancel)
	defer watch.stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cl.server+deadLetterPath(c, "/replay"), bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if cl.token != "" {
		req.Header.Set("Authorization", "Bearer "+cl.token)
	}
	quiet := func(what string) error {
		return cli.Exit(fmt.Sprintf("stopped waiting: %s for %v (--idle-timeout)%s: the server or the connection to it stalled (a half-open connection, or a proxy holding the answer back). "+
			"The replay may still be running in the server: `egrid deadletter status --server %s` lists the replays running there and how many of their events have settled, "+
			"and events that fail again show in `egrid deadletter list`; raise --idle-timeout for a slow network", what, idle, watch.beats(), cl.server), 1)
	}
	resp, err := replayClient(cl, body.DryRun, body.Wait).Do(req)
	if err != nil {
		if errors.Is(context.Cause(ctx), errReplayQuiet) {
			return quiet("no answer from " + cl.server)
		}
		return cli.Exit(fmt.Sprintf("calling %s: %v (is `egrid serve` running? use --server)", cl.server, err), 1)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return serverError(resp, msg)
	}
	if !watch.answered(resp.Header.Get(httpapi.ReplayHeartbeatHeader)) && body.Wait && !body.DryRun {
		fmt.Fprintf(e.Stderr, "note: %s sends no heartbeats (an older egrid): waiting with no --idle-timeout; Ctrl-C stops waiting\n", cl.server)
	}
	bar := newProgressBar(e.Stderr)
	sc := bufio.NewScanner(watch.reader(resp.Body))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var sum *router.ReplaySummary
	for sc.Scan() {
		var line httpapi.ReplayStreamLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return cli.Exit(fmt.Sprintf("the server answered something that is not a replay report: %v", err), 1)
		}
		switch {
		case line.Progress != nil:
			bar.update(termSafe(string(line.Progress.Stage)), line.Progress.Done, line.Progress.Total)
		case line.Error != nil:
			bar.finish()
			return cli.Exit("replay failed: "+line.Error.Message, 1)
		case line.Summary != nil:
			sum = line.Summary
		}
	}
	bar.finish()
	if err := sc.Err(); err != nil {
		if errors.Is(context.Cause(ctx), errReplayQuiet) {
			return quiet("nothing came from " + cl.server)
		}
		if errors.Is(c.Context.Err(), context.Canceled) {
			return cli.Exit("stopped waiting; the replay goes on in the server (`egrid deadletter status` lists the replays running)", 1)
		}
		return cli.Exit(fmt.Sprintf("reading the replay report: %v", err), 1)
	}
	if sum == nil {
		return cli.Exit("the server ended the replay report without a summary; see its log", 1)
	}
	return printReplaySummary(e, c.String("output"), sum)
}

// defaultReplayIdleTimeout is --idle-timeout's default: four of the server's heartbeat
// intervals ([httpapi.ReplayHeartbeat]).
const defaultReplayIdleTimeout = time.Minute

// errReplayQuiet is the cause a replay call is cancelled with when nothing came for its idle
// timeout.
var errReplayQuiet = errors.New("nothing came from the server for the idle timeout")

// replayWatch cancels a replay call (with errReplayQuiet) once nothing came from the server
// for the idle timeout: no answer to the request, or, from a server that sends heartbeats
// ([httpapi.ReplayHeartbeatHeader]), no bytes of the answer. A replay of many events can run
// for hours, so the bound is on silence, not on the whole. An answer without the header (an
// older egrid, whose answer has lines only as objects are read and events settle) is waited
// for with no idle bound once it came, as before.
type replayWatch struct {
	idle     time.Duration
	timer    *time.Timer
	interval string // the server's heartbeat interval, "" when it sends none
}

func newReplayWatch(idle time.Duration, cancel context.CancelCauseFunc) *replayWatch {
	return &replayWatch{idle: idle, timer: time.AfterFunc(idle, func() { cancel(errReplayQuiet) })}
}

// answered notes the answer's heartbeat header and says whether the server sends heartbeats;
// if not, the watch ends.
func (w *replayWatch) answered(heartbeat string) bool {
	if _, err := time.ParseDuration(heartbeat); err != nil {
		w.timer.Stop()
		return false
	}
	w.interval = heartbeat
	w.timer.Reset(w.idle)
	return true
}

// reader returns body, each read of which that brings bytes starts the idle timeout again.
func (w *replayWatch) reader(body io.Reader) io.Reader {
	if w.interval == "" {
		return body
	}
	return readerFunc(func(p []byte) (int, error) {
		n, err := body.Read(p)
		if n > 0 {
			w.timer.Reset(w.idle)
		}
		return n, err
	})
}

// beats says, for an error, how often the server sends heartbeats ("" when not known).
func (w *replayWatch) beats() string {
	if w.interval == "" {
		return ""
	}
	return ", though it sends a heartbeat every " + w.interval + " while a replay runs"
}

func (w *replayWatch) stop() { w.timer.Stop() }

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// replayClient is the HTTP client of a replay call. A --dry-run or --no-wait replay answers
// once the objects are read, within newClient's 2 minutes like every other call. A replay
// that waits for its events to be delivered or dead-lettered again can take as long as their
// retry schedule, so it has no overall timeout: [replayWatch] bounds the silences instead.
func replayClient(cl *client, dryRun, wait bool) *http.Client {
	if dryRun || !wait {
		return cl.http
	}
	return apiClient(0)
}

func printReplaySummary(e env, format string, sum *router.ReplaySummary) error {
	for _, pr := range sum.Problems {
		fmt.Fprintln(e.Stderr, "warning: not readable:", termSafe(pr))
	}
	if sum.UnlistedProblems > 0 {
		fmt.Fprintf(e.Stderr, "warning: %d more objects or records not readable (not listed)\n", sum.UnlistedProblems)
	}
	if sum.DedupLimited {
		fmt.Fprintf(e.Stderr, "warning: more than %d events selected: each event id is taken once only as far as the newest %d reach, "+
			"so an older record of an event dead-lettered again may be replayed too (receivers deduplicate by id); narrow the selection (--since, --until) to avoid it\n",
			router.MaxReplayIDs, router.MaxReplayIDs)
	}
	if format == "json" {
		if err := printJSON(e.Stdout, sum); err != nil {
			return err
		}
		return replayIncomplete(sum)
	}
	if sum.DryRun {
		fmt.Fprintf(e.Stdout, "dry run: would replay %d events (%d records in %d objects, %d skipped); nothing was re-delivered\n",
			sum.Replayed, sum.Found, sum.Objects, sum.Skipped)
		if len(sum.Events) > 0 {
			tab := newTable("ID", "REASON", "OBJECT")
			for _, ev := range sum.Events {
				tab.row(ev.ID, string(ev.Reason), ev.Object)
			}
			if err := tab.write(e.Stdout); err != nil {
				return err
			}
		}
		if sum.Unlisted > 0 {
			fmt.Fprintf(e.Stdout, "and %d more events, not listed; narrow the selection (--since, --until, --reason) to list them\n", sum.Unlisted)
		}
		printIncomplete(e, sum)
		return replayIncomplete(sum)
	}
	fmt.Fprintf(e.Stdout, "replayed %d events (%d records in %d objects, %d skipped)\n", sum.Replayed, sum.Found, sum.Objects, sum.Skipped)
	switch {
	case sum.Completed, sum.Incomplete && sum.Replayed > 0:
		fmt.Fprintf(e.Stdout, "delivered %d, dead-lettered again %d, dropped %d\n", sum.Delivered, sum.DeadLettered, sum.Dropped)
		if sum.Unread > 0 && !sum.Incomplete { // an older server's summary
			fmt.Fprintf(e.Stdout, "%d events not replayed: they were not found when their objects were read again (see the warnings); replay again to take them\n", sum.Unread)
		}
	case sum.Replayed > 0:
		fmt.Fprintln(e.Stdout, "the replay goes on in the server; `egrid deadletter list` shows events that fail again")
	}
	printIncomplete(e, sum)
	return replayIncomplete(sum)
}

// printIncomplete prints, under a summary table, what an incomplete replay left.
func printIncomplete(e env, sum *router.ReplaySummary) {
	if !sum.Incomplete {
		return
	}
	fmt.Fprintf(e.Stdout, "INCOMPLETE: %d objects not read, %d events not replayed: %s\n", sum.UnreadObjects, sum.Unread, termSafe(sum.IncompleteReason))
}

// replayIncomplete is the error of a replay (or dry run) whose summary says it did not take
// everything it selected: exit code 1, as for every call that did not do all it was asked
// (store check's problems too), after the summary is printed.
func replayIncomplete(sum *router.ReplaySummary) error {
	if !sum.Incomplete {
		return nil
	}
	what := "replay"
	if sum.DryRun {
		what = "dry run"
	}
	return cli.Exit(fmt.Sprintf("%s incomplete: %d objects selected were not read and %d events not replayed: %s",
		what, sum.UnreadObjects, sum.Unread, sum.IncompleteReason), 1)
}

// progressBar draws a progress bar on a terminal, or prints a line per stage and tenth
// elsewhere (logs, CI).
type progressBar struct {
	w        io.Writer
	terminal bool
	stage    string
	lastStep int
	drawn    bool
}

func newProgressBar(w io.Writer) *progressBar {
	b := &progressBar{w: w, lastStep: -1}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			b.terminal = true
		}
	}
	return b
}

func (b *progressBar) update(stage string, done, total int) {
	if stage != b.stage {
		b.finish()
		b.stage, b.lastStep = stage, -1
	}
	if total <= 0 {
		return
	}
	if b.terminal {
		const width = 30
		filled := done * width / total
		fmt.Fprintf(b.w, "\r%-10s [%s%s] %d/%d", stage, strings.Repeat("=", filled), strings.Repeat(" ", width-filled), done, total)
		b.drawn = true
		return
	}
	if step := done * 10 / total; step != b.lastStep {
		b.lastStep = step
		fmt.Fprintf(b.w, "%s: %d/%d\n", stage, done, total)
	}
}

func (b *progressBar) finish() {
	if b.terminal && b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}
