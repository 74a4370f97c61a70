package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/schemas/clip"
)

// The pull delivery routes of a namespace topic's queue event subscription
// (eventgrid-behaviour.md §9; Azure's EventGridNamespace TypeSpec, api-version 2023-11-01 and
// 2024-06-01):
//
//	POST /topics/{topic}/eventsubscriptions/{sub}:receive?maxEvents=1..100&maxWaitTime=10..120
//	POST /topics/{topic}/eventsubscriptions/{sub}:acknowledge           {"lockTokens":[...]}
//	POST /topics/{topic}/eventsubscriptions/{sub}:release?releaseDelayInSeconds=0|10|60|600|3600
//	POST /topics/{topic}/eventsubscriptions/{sub}:reject
//	POST /topics/{topic}/eventsubscriptions/{sub}:renewLock
//
// They take the topic's keys and SAS tokens exactly as publish does, and, as :publish does,
// api-version 2023-11-01 or 2024-06-01, or none (apiversion.go); both versions have these
// bodies (releaseDelayInSeconds came with 2024-06-01; egrid takes it with either).
const pullPath = "POST /topics/{topic}/eventsubscriptions/{subAction}"

// maxLockTokenBytes bounds one lock token of a settle request. A lock token is 39 characters
// (package actors); a longer string is no token, and the answer repeats every token that fails
// (failedLockTokens), so 100 strings of 10 KB, each '<' escaped into six bytes, made a 6 MB
// answer to a 1 MB request. The bound leaves room for longer tokens of a later version.
const maxLockTokenBytes = 256

// maxSettleBody bounds a settle request's body: at most router.MaxLockTokens lock tokens,
// so 1 MB is ample.
const maxSettleBody = 1 << 20

// releaseDelay reads releaseDelayInSeconds: one of [router.ReleaseDelays] in whole seconds
// (the TypeSpec's ReleaseDelay enum: 0, 10, 60, 600, 3600).
func releaseDelay(v string) (time.Duration, error) {
	var allowed []string
	for _, d := range router.ReleaseDelays {
		s := strconv.Itoa(int(d / time.Second))
		if v == s {
			return d, nil
		}
		allowed = append(allowed, s)
	}
	return 0, fmt.Errorf("releaseDelayInSeconds %q is not allowed: use %s or %s", clip.String(v), strings.Join(allowed[:len(allowed)-1], ", "), allowed[len(allowed)-1])
}

// pullOps are the operations after the colon, as the TypeSpec spells them.
var pullOps = []string{"receive", "acknowledge", "release", "reject", "renewLock"}

// settleRequest is the body of every settle operation.
type settleRequest struct {
	LockTokens []string `json:"lockTokens"`
}

// settleResult is the TypeSpec's AcknowledgeResult (and ReleaseResult, RejectResult,
// RenewCloudEventLocksResult): both arrays are always present.
type settleResult struct {
	FailedLockTokens    []failedLockToken `json:"failedLockTokens"`
	SucceededLockTokens []string          `json:"succeededLockTokens"`
}

type failedLockToken struct {
	LockToken string       `json:"lockToken"`
	Error     apiErrorBody `json:"error"`
}

// EndPolls ends every :receive long poll in progress, and makes later ones answer at once:
// each answers 200 with no events (an event handed out at that very moment stays locked until
// its lock expires, then comes back; see [router.Router.Receive]). A server calls it when it starts
// to shut down (http.Server.RegisterOnShutdown), so a consumer waiting up to 120 s does not
// hold the shutdown. It is safe to call more than once, from any goroutine.
func (a *API) EndPolls() { a.endPolls() }

// AdmitPolls bounds the :receive long polls with admit, which takes a slot for a poll about to
// wait on queue — its event subscription, named "topic/subscription" as created — or answers
// w itself (429) and returns ok false: the Admit of a PollLimit of package router/httpserver.
// A poll is admitted only once it has passed every check that answers at once: its
// credentials, its parameters, and that its topic and queue subscription exist. So requests
// with a wrong key (or none, without --insecure-dev) never hold a slot: they are answered 401
// even when the bound is full, and cannot take a slot from a consumer with the key. Call it
// before the API serves; without it the polls are not bounded.
func (a *API) AdmitPolls(admit func(w http.ResponseWriter, queue string) (release func(), ok bool)) {
	a.admitPoll = admit
}

func (a *API) handlePull(w http.ResponseWriter, req *http.Request) {
	topicName := req.PathValue("topic")
	subName, op, ok := strings.Cut(req.PathValue("subAction"), ":")
	if ok {
		op = canonicalOp(op)
	}
	if !ok || op == "" {
		writeError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("no route for POST %s: the operations of an event subscription are :%s", clip.String(req.URL.Path), strings.Join(pullOps, ", :")))
		return
	}
	if !a.checkAPIVersion(w, req, "POST /topics/{topic}/eventsubscriptions/{sub}:"+op, namespaceAPIVersions) {
		return
	}
	t, err := a.topic(req.Context(), topicName)
	if err != nil {
		// As publish: an unknown topic answers as wrong credentials do, unless the request
		// passes without any (--insecure-dev).
		a.writeTopicError(w, req, topicName, err, fmt.Sprintf("topic %q does not exist: create it first (egrid topic create --name %s --kind namespace)", clip.String(topicName), clip.String(topicName)))
		return
	}
	if status, msg := a.authorize(req, topicName, t.keys()); status != 0 {
		writeAuthError(w, status, msg)
		return
	}
	_, sub, err := a.r.FindSubscriptionName(req.Context(), t.name, subName)
	if err != nil {
		a.writePullError(w, t.name, subName, err)
		return
	}
	if op == "receive" {
		a.receive(w, req, t.name, sub)
		return
	}
	a.settle(w, req, t.name, sub, op)
}

// canonicalOp returns op as the TypeSpec spells it (matched ignoring case), or "".
func canonicalOp(op string) string {
	for _, o := range pullOps {
		if strings.EqualFold(o, op) {
			return o
		}
	}
	return ""
}

func (a *API) receive(w http.ResponseWriter, req *http.Request, topic, sub string) {
	o, err := receiveOptions(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	if err := discardReceiveBody(req); err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge", err.Error())
		return
	}
	if a.admitPoll != nil && a.polls.Err() == nil { // after EndPolls a poll answers at once
		// A receive from a push subscription is refused at once: it takes no slot.
		spec, err := a.r.Subscription(topic, sub)
		if err == nil && !spec.IsQueue() {
			err = router.ErrNotQueueSubscription
		}
		if err != nil {
			a.writePullError(w, topic, sub, err)
			return
		}
		release, ok := a.admitPoll(w, topic+"/"+sub)
		if !ok {
			return
		}
		defer release()
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	stop := context.AfterFunc(a.polls, cancel)
	defer stop()
	// The events count against the router's bound on receive answers held at once until
	// the handler is done with them: written, failed, timed out, or the client gone.
	evs, done, err := a.r.ReceiveHeld(ctx, topic, sub, o)
	defer done()
	if err != nil && !(ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		a.writePullError(w, topic, sub, err)
		return
	}
	if afterReceive != nil {
		afterReceive(req)
	}
	if req.Context().Err() != nil {
		a.releaseUnanswered(topic, sub, evs) // the client went away: nobody to answer
		return
	}
	// The answer (up to MaxReceiveEvents events of 1 MB) is in memory until the consumer has
	// read it, and the server has no write timeout (the long poll would outlast it): a
	// consumer that stops reading must not hold it for ever (answerWriter). net/http lifts
	// the deadline once the answer is sent, so the connection's next requests are not cut by
	// it.
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	aw := newAnswerWriter(w, time.Now().Add(receiveAnswerLimit))
	writeReceiveResult(aw, evs)
	aw.flush()
}

// answerPiece is the most of a :receive answer one write sends under one
// httpserver.AnswerStall deadline: 64 KiB, as httpserver.BoundAnswers gives every answer.
const answerPiece = 64 << 10

// receiveAnswerLimit bounds the time a consumer has to read a whole :receive answer once it
// is ready, however steadily it reads: 100 events of 1 MB at 170 KB/s. Within it, each 64 KiB
// has httpserver.AnswerStall to be taken in (answerWriter). Past either the server closes
// the connection; the events whose lock tokens did not arrive come back when their locks
// expire (at most 300 s after the receipt: an answer read for longer would hand out expired
// tokens anyway), as after any lost answer.
const receiveAnswerLimit = 10 * time.Minute

// answerWriter writes a :receive answer in pieces of at most answerPiece bytes, each with
// httpserver.AnswerStall to be taken in by the client and none past end: a client that
// keeps reading gets the whole answer, one that stalls is cut off after a minute, and none
// holds the answer past end. The first write error sticks: the rest is dropped.
type answerWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	end time.Time
	err error
}

func newAnswerWriter(w http.ResponseWriter, end time.Time) *answerWriter {
	return &answerWriter{w: w, rc: http.NewResponseController(w), end: end}
}

// arm gives the next piece its deadline. Setting it also takes the answer's deadline over from
// httpserver.BoundAnswers.
func (a *answerWriter) arm() {
	at := time.Now().Add(httpserver.AnswerStall)
	if at.After(a.end) {
		at = a.end
	}
	_ = a.rc.SetWriteDeadline(at)
}

func (a *answerWriter) write(p []byte) {
	for len(p) > 0 && a.err == nil {
		part := p[:min(len(p), answerPiece)]
		a.arm()
		_, a.err = a.w.Write(part)
		p = p[len(part):]
	}
}

// flush sends what net/http holds of the answer, under a deadline of its own.
func (a *answerWriter) flush() {
	if a.err == nil {
		a.arm()
		a.err = a.rc.Flush()
	}
}

// afterReceive, when set, is called as a receive's events were taken, before the client is
// checked (tests).
var afterReceive func(req *http.Request)

// releaseUnanswered releases, off the handler, the events a receive took for a client that
// went away before its answer: nobody will settle them, so they are available again at once
// rather than after their lock, as [router.Router.Receive] releases those of a receive
// cancelled before the actor answered. Their delivery counts stay raised (each was handed
// out). A release that fails leaves them to their lock's end.
func (a *API) releaseUnanswered(topic, sub string, evs []router.ReceivedEvent) {
	if len(evs) == 0 {
		return
	}
	tokens := make([]string, len(evs))
	for i, e := range evs {
		tokens[i] = e.LockToken
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseUnansweredTimeout)
		defer cancel()
		if _, err := a.r.Release(ctx, topic, sub, tokens, 0); err != nil {
			a.log.Warn("releasing the events of a receive whose client went away before its answer: they are available again when their locks end", "topic", topic, "subscription", sub, "events", len(tokens), "err", err)
		}
	}()
}

// releaseUnansweredTimeout bounds releaseUnanswered's release.
const releaseUnansweredTimeout = 30 * time.Second

// errReceiveTooLarge is discardReceiveBody's error for a body over maxSettleBody: 413, as a
// settle body over the limit is.
var errReceiveTooLarge = fmt.Errorf("the request body is over the limit of %d bytes (1 MB), and a receive reads none: send the receive without a body", maxSettleBody)

// discardReceiveBody reads and drops a receive's body, which the TypeSpec does not define, so
// net/http clears the connection's read deadline (httpserver: ReadHeaderTimeout +
// BodyTimeout) before the long poll, which may last router.MaxReceiveWait. A body over
// maxSettleBody is errReceiveTooLarge: it is refused, not read to its end (a body announced
// as larger is refused unread), rather than dropped in part without a word. An error reading
// the body is left to the poll, which ends when the client has gone.
func discardReceiveBody(req *http.Request) error {
	if req.ContentLength > maxSettleBody {
		return errReceiveTooLarge
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(req.Body, maxSettleBody+1))
	if n > maxSettleBody {
		return errReceiveTooLarge
	}
	return nil
}

// writeReceiveResult writes the TypeSpec's ReceiveResult for evs to a:
//
//	{"value":[{"brokerProperties":{"lockToken":"…","deliveryCount":1},"event":{…}}]}
//
// It is written by hand because json.Marshal would validate and compact every event again
// (a tenth of the CPU of a pull in a profile of `egrid bench --scenario pull`); the events
// are the router's, valid JSON already. Each event is written from its own bytes: the answer
// is never built whole, so it costs no copy of the events (up to 100 of 1 MB).
func writeReceiveResult(a *answerWriter, evs []router.ReceivedEvent) {
	b := make([]byte, 0, 256)
	b = append(b, `{"value":[`...)
	for i, ev := range evs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"brokerProperties":{"lockToken":`...)
		tok, _ := json.Marshal(ev.LockToken) // a string always marshals
		b = append(b, tok...)
		b = append(b, `,"deliveryCount":`...)
		b = strconv.AppendInt(b, int64(ev.DeliveryCount), 10)
		b = append(b, `},"event":`...)
		if len(ev.Event) == 0 {
			b = append(b, "null"...)
		} else {
			a.write(b)
			a.write(ev.Event)
			b = b[:0]
		}
		b = append(b, '}')
	}
	a.write(append(b, "]}"...))
}

// receiveOptions reads maxEvents and maxWaitTime from a query that parses (strictQuery), each
// given at most once (onceQuery),
// reporting every problem at once.
func receiveOptions(req *http.Request) (router.ReceiveOptions, error) {
	o := router.ReceiveOptions{MaxEvents: 1, MaxWait: router.DefaultReceiveWait}
	q, err := strictQuery(req)
	if err != nil {
		return o, err
	}
	var errs []error
	maxEvents, err := onceQuery(q, "maxEvents")
	if err != nil {
		errs = append(errs, err)
	}
	maxWait, err := onceQuery(q, "maxWaitTime")
	if err != nil {
		errs = append(errs, err)
	}
	if maxEvents != "" {
		n, err := queryInt(maxEvents)
		if err != nil || n < 1 || n > router.MaxReceiveEvents {
			errs = append(errs, fmt.Errorf("maxEvents %q is out of range: use a whole number from 1 to %d (default 1)", clip.String(maxEvents), router.MaxReceiveEvents))
		} else {
			o.MaxEvents = n
		}
	}
	if maxWait != "" {
		n, err := queryInt(maxWait)
		lo, hi := int(router.MinReceiveWait/time.Second), int(router.MaxReceiveWait/time.Second)
		if err != nil || n < lo || n > hi {
			errs = append(errs, fmt.Errorf("maxWaitTime %q is out of range: use whole seconds from %d to %d (default %d)", clip.String(maxWait), lo, hi, int(router.DefaultReceiveWait/time.Second)))
		} else {
			o.MaxWait = time.Duration(n) * time.Second
		}
	}
	if len(errs) > 0 {
		return o, joinMessages(errs)
	}
	return o, nil
}

func (a *API) settle(w http.ResponseWriter, req *http.Request, topic, sub, op string) {
	var delay time.Duration
	if op == "release" {
		q, err := strictQuery(req)
		if err != nil {
			writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
			return
		}
		v, err := onceQuery(q, "releaseDelayInSeconds")
		if err != nil {
			writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
			return
		}
		if v != "" {
			d, err := releaseDelay(v)
			if err != nil {
				writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
				return
			}
			delay = d
		}
	}
	if enc := contentEncoding(req); enc != "" {
		writeEncodingError(w, enc)
		return
	}
	release, _, ok := a.admitBodyOf(w, req)
	if !ok {
		return
	}
	defer release()
	tokens, err := readLockTokens(req)
	if errors.Is(err, errSettleTooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge", err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	ctx := req.Context()
	var res router.SettleResult
	switch op {
	case "acknowledge":
		res, err = a.r.Acknowledge(ctx, topic, sub, tokens)
	case "release":
		res, err = a.r.Release(ctx, topic, sub, tokens, delay)
	case "reject":
		res, err = a.r.Reject(ctx, topic, sub, tokens)
	case "renewLock":
		res, err = a.r.RenewLock(ctx, topic, sub, tokens)
	}
	if err != nil {
		a.writePullError(w, topic, sub, err)
		return
	}
	out := settleResult{FailedLockTokens: make([]failedLockToken, 0, len(res.Failed)), SucceededLockTokens: res.Succeeded}
	if out.SucceededLockTokens == nil {
		out.SucceededLockTokens = []string{}
	}
	for _, f := range res.Failed {
		out.FailedLockTokens = append(out.FailedLockTokens, failedLockToken{LockToken: f.LockToken, Error: apiErrorBody{Code: f.Code, Message: f.Message}})
	}
	writeCompactJSON(w, out)
}

// errSettleTooLarge is readLockTokens' error for a body over maxSettleBody: 413, as an admin
// or publish body over its limit is.
var errSettleTooLarge = fmt.Errorf("the request body is over the limit of %d bytes (1 MB): send at most %d lock tokens per request, as receive returned them", maxSettleBody, router.MaxLockTokens)

// readLockTokens reads {"lockTokens": [...]}: a body that is not that JSON object, a misspelt
// member, a member sent twice, bytes that are not UTF-8 or half a surrogate pair
// (checkStrictJSON: encoding/json would change the token, and the answer would repeat a token
// the client did not send), or no tokens at all is an error saying what to send.
func readLockTokens(req *http.Request) ([]string, error) {
	const want = `send {"lockTokens": ["<lockToken of a received event>", ...]}`
	body, err := io.ReadAll(io.LimitReader(req.Body, maxSettleBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %v", shortBody(err, len(body), req.ContentLength))
	}
	if len(body) > maxSettleBody {
		return nil, errSettleTooLarge
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("the request has no body: " + want)
	}
	if err := checkStrictJSON(body, "the lock token list"); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var r settleRequest
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("the body is not a lock token list (%s): %s", jsonProblem(err), want)
	}
	if dec.More() {
		return nil, errors.New("the body holds more than one JSON value: " + want)
	}
	if len(r.LockTokens) == 0 {
		return nil, errors.New("lockTokens is missing or empty: " + want)
	}
	if len(r.LockTokens) > router.MaxLockTokens {
		return nil, fmt.Errorf("lockTokens holds %d tokens; the limit is %d: settle in several requests", len(r.LockTokens), router.MaxLockTokens)
	}
	for i, tok := range r.LockTokens {
		if tok == "" {
			return nil, fmt.Errorf("lockTokens[%d] is empty or null: %s", i, want)
		}
		if len(tok) > maxLockTokenBytes {
			return nil, fmt.Errorf("lockTokens[%d] is %d bytes long, longer than any lock token (at most %d bytes): %s", i, len(tok), maxLockTokenBytes, want)
		}
	}
	return r.LockTokens, nil
}

// writePullError maps the router's errors of a pull operation to statuses.
func (a *API) writePullError(w http.ResponseWriter, topic, sub string, err error) {
	switch {
	case errors.Is(err, router.ErrNotQueueSubscription):
		writeError(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("event subscription %q of topic %q delivers by push: receive and settle need a subscription with deliveryConfiguration.deliveryMode Queue (egrid event-subscription create --delivery-mode queue)", clip.String(sub), clip.String(topic)))
	case errors.Is(err, router.ErrSubscriptionNotFound):
		writeError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("event subscription %q of topic %q does not exist: create it with deliveryConfiguration.deliveryMode Queue (egrid event-subscription create --topic %s --name %s --delivery-mode queue)", clip.String(sub), clip.String(topic), clip.String(topic), clip.String(sub)))
	case errors.Is(err, router.ErrTopicNotFound):
		writeError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("topic %q does not exist", clip.String(topic)))
	case errors.Is(err, router.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the server is shutting down: retry later")
	case errors.Is(err, router.ErrTooManyPolls):
		// The node running the subscription refused the poll routed to it: answered as a
		// poll over this server's own bound is (httpserver.PollLimit).
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "TooManyRequests", err.Error())
	case errors.Is(err, router.ErrInsufficientStorage):
		// The store of the node running the subscription failed a write on a full disk (it
		// also wraps router.ErrUnavailable): answered as a publish or an admin write is, 507.
		// Its own error names files: it goes to the log only.
		a.log.Error("pull operation failed: the disk holding the store is full", "topic", topic, "subscription", sub, "err", err)
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusInsufficientStorage, "InsufficientStorage", insufficientStorage+" and the operation was not recorded: retry later; "+freeSpace)
	case errors.Is(err, router.ErrSubscriptionNotRunning):
		// The subscription's actor is not running here at the moment: a state write of it was
		// fenced (another node took it over), failed (it restarts from the store), or it is
		// starting or stopping. Nothing of the operation was recorded; made again, it reaches
		// the actor that runs the subscription then. The actor's error can name files on the
		// server: it goes to the log only.
		a.log.Warn("pull operation refused: the event subscription is not running here at the moment", "topic", topic, "subscription", sub, "err", err)
		msg := fmt.Sprintf("event subscription %q of topic %q is not running on this server at the moment (it is restarting or moving to another node): nothing of the operation was recorded; send it again", clip.String(sub), clip.String(topic))
		if errors.Is(err, router.ErrSubscriptionMoved) {
			msg = fmt.Sprintf("event subscription %q of topic %q moved to another node: nothing of the operation was recorded; send it again", clip.String(sub), clip.String(topic))
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", msg)
	case errors.Is(err, router.ErrStoreDamaged):
		// Data the operation needs is damaged in the store: retrying does not help.
		a.log.Error("pull operation failed: data it needs in the store is damaged", "topic", topic, "subscription", sub, "err", err)
		writeError(w, http.StatusInternalServerError, "InternalServerError", storeDamaged)
	case errors.Is(err, router.ErrUnavailable):
		// The store's own error can name files on the server: it goes to the log only.
		a.log.Error("pull operation failed: the store is unavailable", "topic", topic, "subscription", sub, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the store could not record the operation: retry later; the server log has the cause")
	default:
		a.log.Error("pull operation failed", "topic", topic, "subscription", sub, "err", err)
		writeError(w, http.StatusInternalServerError, "InternalServerError", "the operation failed: retry later; the server log has the cause")
	}
}

// writeCompactJSON answers 200 with v as one line of JSON.
func writeCompactJSON(w http.ResponseWriter, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalServerError", "encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(raw)
}

// joinMessages joins errors into one whose message lists them with "; ".
func joinMessages(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}
