package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
)

// deadLetterRoutes registers the dead-letter admin routes:
//
//	GET  /admin/deadLetters                                                 the dead-letter actor's state and the replays running
//	GET  /admin/topics/{topic}/eventSubscriptions/{name}/deadLetters         objects (?since=&after=&until=&limit=)
//	GET  /admin/topics/{topic}/eventSubscriptions/{name}/deadLetters/records records (?key=&since=&after=&offset=&until=&reason=&limit=)
//	POST /admin/topics/{topic}/eventSubscriptions/{name}/deadLetters/replay  replay; NDJSON progress and heartbeats, then the summary
func (a *API) deadLetterRoutes(mux *http.ServeMux) {
	const base = "/admin/topics/{topic}/eventSubscriptions/{name}/deadLetters"
	mux.HandleFunc("GET /admin/deadLetters", a.admin(a.getDeadLetterStatus))
	mux.HandleFunc("GET "+base, a.admin(a.listDeadLetterObjects))
	mux.HandleFunc("GET "+base+"/records", a.admin(a.listDeadLetterRecords))
	mux.HandleFunc("POST "+base+"/replay", a.admin(a.replayDeadLettersHTTP))
}

// deadLetterObjectView is one object in an admin answer.
type deadLetterObjectView struct {
	Key          string    `json:"key"`
	Size         int64     `json:"size"`
	ETag         string    `json:"eTag"`
	LastModified time.Time `json:"lastModified"`
	URL          string    `json:"url"`
}

// DeadLetterRecordView is one record in an admin answer: the record's facts with Event Grid's
// names, the object it came from, and the event in the topic's input schema.
type DeadLetterRecordView struct {
	Object                  string          `json:"object"`
	Written                 time.Time       `json:"written"`
	ID                      string          `json:"id"`
	EventType               string          `json:"eventType,omitempty"`
	Subject                 string          `json:"subject,omitempty"`
	DeadLetterReason        string          `json:"deadLetterReason"`
	DeliveryAttempts        int             `json:"deliveryAttempts"`
	LastDeliveryOutcome     string          `json:"lastDeliveryOutcome,omitempty"`
	LastHTTPStatusCode      int             `json:"lastHttpStatusCode,omitempty"`
	PublishTime             time.Time       `json:"publishTime"`
	LastDeliveryAttemptTime time.Time       `json:"lastDeliveryAttemptTime,omitzero"`
	Event                   json.RawMessage `json:"event"`
}

// DeadLetterMoreView says what a records answer left out once it was full (see
// [router.DeadLetterRead.More]): records of the last object read, objects not read, and the
// since=, after= and offset= that take up with the first record not answered (since= alone
// takes up from the first object not wholly answered, its records answered again: an object
// holding more records than the limit is never passed so).
type DeadLetterMoreView struct {
	Records int       `json:"records"`
	Objects int       `json:"objects"`
	Since   time.Time `json:"since"`
	After   string    `json:"after,omitempty"`
	Offset  int       `json:"offset,omitempty"`
}

// DeadLetterObjectsMoreView says what an objects answer left out once it held its limit:
// the objects left, and the since= and after= that take up with the first of them (the time
// and key of the last object answered).
type DeadLetterObjectsMoreView struct {
	Objects int       `json:"objects"`
	Since   time.Time `json:"since"`
	After   string    `json:"after"`
}

// deadLetterQuery parses ?key=&since=&after=&offset=&until=&reason=&limit= (limit: default
// [router.DefaultDeadLetterLimit]) from a query that parses (strictQuery), each parameter given
// at most once (onceQuery), reporting every problem at once.
func deadLetterQuery(req *http.Request) (router.DeadLetterQuery, error) {
	q := router.DeadLetterQuery{Limit: router.DefaultDeadLetterLimit}
	params, err := strictQuery(req)
	if err != nil {
		return q, err
	}
	var errs []error
	get := func(name string) string {
		v, err := onceQuery(params, name)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	q.Key, q.After = get("key"), get("after")
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if v := get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: use an RFC 3339 time such as 2026-01-02T15:04:05Z", p.name, clip.String(v)))
			}
			*p.dst = t
		}
	}
	if v := get("reason"); v != "" {
		reason, err := schemas.ParseReason(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("reason: %w", err))
		}
		q.Reason = reason
	}
	if q.After != "" && q.Since.IsZero() {
		errs = append(errs, fmt.Errorf("after=%q: give it with since=, both as a previous answer's more says", clip.String(q.After)))
	}
	if v := get("offset"); v != "" {
		n, err := queryInt(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("offset=%q: use 0 or more records to leave out, as a previous answer's more says", clip.String(v)))
		}
		q.Offset = n
	}
	if v := get("limit"); v != "" {
		n, err := queryInt(v)
		switch {
		case err != nil || n <= 0:
			errs = append(errs, fmt.Errorf("limit=%q: use a positive number such as %d", clip.String(v), router.DefaultDeadLetterLimit))
		case n > router.MaxDeadLetterLimit:
			errs = append(errs, fmt.Errorf("limit=%d: at most %d in one answer; take the next ones with since= and after= from the answer's more", n, router.MaxDeadLetterLimit))
		}
		q.Limit = n
	}
	return q, errors.Join(errs...)
}

// writeDeadLetterError maps dead-letter errors to statuses.
func (a *API) writeDeadLetterError(w http.ResponseWriter, req *http.Request, err error) {
	switch {
	case errors.Is(err, router.ErrReplayRunning):
		writeError(w, http.StatusConflict, "Conflict", err.Error())
	case errors.Is(err, router.ErrDeadLettersUnavailable), errors.Is(err, router.ErrNoDeadLetterDestination), errors.Is(err, router.ErrReplayIntoQueue),
		errors.Is(err, router.ErrBadDeadLetterQuery):
		writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
	case errors.Is(err, router.ErrDeadLetterStoreUnavailable) && errors.Is(err, router.ErrDeadLetterCredentialsRefused):
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error()+"; "+router.MinIOCredentialsHint)
	case errors.Is(err, router.ErrDeadLetterStoreUnavailable):
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error()+"; check that MinIO is running and retry")
	default:
		a.writeAdminError(w, req, err)
	}
}

// deadLetterStatusView is GET /admin/deadLetters' answer. While the dead-letter actor still
// reads its outbox at start, loading is true with loadingSince, and the counts of records
// (waiting, writing, retrying) are not known yet (zero).
type deadLetterStatusView struct {
	Waiting        int       `json:"waiting"`
	Writing        int       `json:"writing"`
	Retrying       int       `json:"retrying"`
	ObjectsWritten int       `json:"objectsWritten"`
	RecordsWritten int       `json:"recordsWritten"`
	RecordsDropped int       `json:"recordsDropped"`
	Loading        bool      `json:"loading,omitempty"`
	LoadingSince   time.Time `json:"loadingSince,omitzero"`
	// Replays are the replays running on this server.
	Replays []ReplayStatusView `json:"replays"`
}

// ReplayStatusView is a replay running, in GET /admin/deadLetters.
type ReplayStatusView struct {
	Topic        string    `json:"topic"`
	Subscription string    `json:"subscription"`
	Started      time.Time `json:"started"`
	Events       int       `json:"events"`
	Settled      int       `json:"settled"`
}

func (a *API) getDeadLetterStatus(w http.ResponseWriter, req *http.Request) {
	st, err := a.r.DeadLetterStatus(req.Context())
	if err != nil {
		a.writeDeadLetterError(w, req, err)
		return
	}
	view := deadLetterStatusView{
		Waiting: st.Waiting, Writing: st.Writing, Retrying: st.Retrying,
		ObjectsWritten: st.ObjectsWritten, RecordsWritten: st.RecordsWritten, RecordsDropped: st.RecordsDropped,
		Loading: st.Loading, LoadingSince: st.LoadingSince, Replays: make([]ReplayStatusView, 0, len(st.Replays)),
	}
	for _, rp := range st.Replays {
		view.Replays = append(view.Replays, ReplayStatusView{Topic: rp.Topic, Subscription: rp.Subscription, Started: rp.Started, Events: rp.Events, Settled: rp.Settled})
	}
	writeJSON(w, http.StatusOK, view)
}

func (a *API) listDeadLetterObjects(w http.ResponseWriter, req *http.Request) {
	q, err := deadLetterQuery(req)
	if err == nil && q.Offset != 0 {
		err = errors.New("offset= takes up inside an object of …/deadLetters/records; a listing of objects takes up with since= and after=")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	list, err := a.r.DeadLetterObjects(req.Context(), req.PathValue("topic"), req.PathValue("name"), q)
	if err != nil {
		a.writeDeadLetterError(w, req, err)
		return
	}
	out := struct {
		Value []deadLetterObjectView     `json:"value"`
		More  *DeadLetterObjectsMoreView `json:"more,omitempty"`
	}{Value: make([]deadLetterObjectView, 0, len(list.Objects))}
	if list.More {
		out.More = &DeadLetterObjectsMoreView{Objects: list.Unlisted, Since: list.Next, After: list.After}
	}
	for _, o := range list.Objects {
		out.Value = append(out.Value, deadLetterObjectView{Key: o.Key, Size: o.Size, ETag: o.ETag, LastModified: o.LastModified, URL: o.URL})
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) listDeadLetterRecords(w http.ResponseWriter, req *http.Request) {
	q, err := deadLetterQuery(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	read, err := a.r.DeadLetterRecords(req.Context(), req.PathValue("topic"), req.PathValue("name"), q)
	if err != nil {
		a.writeDeadLetterError(w, req, err)
		return
	}
	out := struct {
		Objects  int                    `json:"objects"`
		Value    []DeadLetterRecordView `json:"value"`
		Problems []string               `json:"problems,omitempty"`
		// UnlistedProblems counts the problems left out of Problems (it lists the first 100).
		UnlistedProblems int                 `json:"unlistedProblems,omitempty"`
		More             *DeadLetterMoreView `json:"more,omitempty"`
	}{Objects: read.Objects, Value: []DeadLetterRecordView{}, Problems: read.Problems, UnlistedProblems: read.UnlistedProblems}
	if read.More {
		out.More = &DeadLetterMoreView{Records: read.Left, Objects: read.Unread, Since: read.Next, After: read.After, Offset: read.Offset}
	}
	for _, e := range read.Entries {
		v := DeadLetterRecordView{
			Object: e.Object, Written: e.Written, ID: e.Event.ID, EventType: e.Event.Type, Subject: e.Event.Subject,
			DeadLetterReason: string(e.Reason), DeliveryAttempts: e.DeliveryAttempts, LastHTTPStatusCode: e.LastHTTPStatus,
			PublishTime: e.PublishTime, LastDeliveryAttemptTime: e.LastAttemptTime, Event: e.Event.Raw,
		}
		if e.LastOutcome != 0 {
			v.LastDeliveryOutcome = e.LastOutcome.String()
		}
		out.Value = append(out.Value, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// ReplayRequest is the body of POST …/deadLetters/replay.
type ReplayRequest struct {
	Since  time.Time `json:"since,omitzero"`
	Until  time.Time `json:"until,omitzero"`
	Reason string    `json:"reason,omitempty"`
	DryRun bool      `json:"dryRun,omitempty"`
	Wait   bool      `json:"wait,omitempty"`
}

// ReplayStreamLine is one line of the replay route's answer (application/x-ndjson): progress
// reports and heartbeats, then the summary or an error. A client skips a line of a kind it
// does not know.
type ReplayStreamLine struct {
	Progress *router.ReplayProgress `json:"progress,omitempty"`
	// Heartbeat is set on a line written because no other was for [ReplayHeartbeatHeader]'s
	// interval: the replay still runs, and the connection carries its answer.
	Heartbeat bool                  `json:"heartbeat,omitempty"`
	Summary   *router.ReplaySummary `json:"summary,omitempty"`
	Error     *apiErrorBody         `json:"error,omitempty"`
}

// ReplayHeartbeatHeader is the header of a replay's answer that gives the heartbeat interval
// (a Go duration, "15s"): while the replay runs, the answer has a line at least that often, a
// {"heartbeat":true} when nothing else came, so a client can give up on a connection or
// server that went quiet without bounding the replay's whole length. Servers that send no
// heartbeats send no header.
const ReplayHeartbeatHeader = "Egrid-Replay-Heartbeat"

// ReplayHeartbeat is the interval of a replay answer's heartbeats.
const ReplayHeartbeat = 15 * time.Second

// replayHeartbeat is ReplayHeartbeat; tests set it lower.
var replayHeartbeat = ReplayHeartbeat

func (a *API) replayDeadLettersHTTP(w http.ResponseWriter, req *http.Request) {
	if enc := contentEncoding(req); enc != "" {
		writeEncodingError(w, enc)
		return
	}
	var body ReplayRequest
	const maxReplayBody = 1 << 16
	raw, err := io.ReadAll(io.LimitReader(req.Body, maxReplayBody+1))
	if len(raw) > maxReplayBody {
		writeError(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge", `the body is over the limit of 64 KB for a replay request: send only {"since":...,"until":...,"reason":...,"dryRun":...,"wait":...}`)
		return
	}
	if err == nil && len(strings.TrimSpace(string(raw))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		err = dec.Decode(&body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", "the body is not a replay request: "+jsonValueError(err, raw, &body, "")+`; send {"since":"2026-01-02T15:04:05Z","until":...,"reason":...,"dryRun":false,"wait":true}`)
		return
	}
	opts := router.ReplayOptions{Since: body.Since, Until: body.Until, DryRun: body.DryRun, Wait: body.Wait}
	if body.Reason != "" {
		if opts.Reason, err = schemas.ParseReason(body.Reason); err != nil {
			writeError(w, http.StatusBadRequest, "BadRequest", "reason: "+err.Error())
			return
		}
	}
	topic, name := req.PathValue("topic"), req.PathValue("name")
	err = a.r.CanReplay(topic, name, opts.DryRun)
	if err == nil {
		err = router.DeadLetterQuery{Since: opts.Since, Until: opts.Until}.Check()
	}
	if err != nil {
		a.writeDeadLetterError(w, req, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set(ReplayHeartbeatHeader, replayHeartbeat.String())
	w.WriteHeader(http.StatusOK)
	streamReplay(req.Context(), w, replayHeartbeat, func(ctx context.Context, progress func(router.ReplayProgress)) (*router.ReplaySummary, error) {
		opts.Progress = progress
		return a.r.ReplayDeadLetters(ctx, topic, name, opts)
	})
}

// streamReplay writes a replay's answer: its progress reports as they come, a heartbeat line
// whenever none was written for interval, then its summary or error. The replay runs on its
// own goroutine, its progress handed over (and waited for) one report at a time, so this one
// is the answer's only writer; it returns once the replay has, and panics if it did.
func streamReplay(ctx context.Context, w http.ResponseWriter, interval time.Duration,
	replay func(ctx context.Context, progress func(router.ReplayProgress)) (*router.ReplaySummary, error)) {
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(l ReplayStreamLine) {
		_ = enc.Encode(l)
		_ = rc.Flush()
	}
	type result struct {
		sum      *router.ReplaySummary
		err      error
		panicked any
	}
	reports := make(chan router.ReplayProgress)
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{panicked: p} // panicked again below, for Guard to answer
			}
		}()
		sum, err := replay(ctx, func(p router.ReplayProgress) {
			select {
			case reports <- p:
			case <-ctx.Done(): // the client is gone: nobody reads the answer
			}
		})
		done <- result{sum: sum, err: err}
	}()
	beat := time.NewTicker(interval)
	defer beat.Stop()
	for {
		select {
		case p := <-reports:
			send(ReplayStreamLine{Progress: &p})
			beat.Reset(interval)
		case <-beat.C:
			send(ReplayStreamLine{Heartbeat: true})
		case res := <-done: // after every report: each is taken before the replay goes on
			if res.panicked != nil {
				panic(res.panicked)
			}
			if res.err != nil {
				send(ReplayStreamLine{Error: &apiErrorBody{Code: "ReplayFailed", Message: res.err.Error()}})
				return
			}
			send(ReplayStreamLine{Summary: res.sum})
			return
		}
	}
}
