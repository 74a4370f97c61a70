package httpapi

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/devguard"
	"github.com/egridio/egrid/router/sas"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/bufpool"
	"github.com/egridio/egrid/schemas/clip"
)

func (a *API) handleClassicPublish(w http.ResponseWriter, req *http.Request) {
	if !a.checkAPIVersion(w, req, "POST /topics/{topic}/api/events", classicAPIVersions) {
		return
	}
	a.publishHTTP(w, req, req.PathValue("topic"), false)
}

func (a *API) handleNamespacePublish(w http.ResponseWriter, req *http.Request) {
	name, action, ok := strings.Cut(req.PathValue("topicAction"), ":")
	if !ok || action != "publish" {
		writeError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("no route for POST %s: publish to /topics/{topic}/api/events or /topics/{topic}:publish", clip.String(req.URL.Path)))
		return
	}
	if !a.checkAPIVersion(w, req, "POST /topics/{topic}:publish", namespaceAPIVersions) {
		return
	}
	a.publishHTTP(w, req, name, true)
}

// topic is a topic's definition as one publish sees it, read once for the whole request
// whatever updates run meanwhile.
type topic struct {
	name   string // as created
	spec   router.TopicSpec
	schema schemas.Schema
}

// keys returns the topic's keys, which a publish or a pull must present one of.
func (t *topic) keys() []string { return []string{t.spec.Key1, t.spec.Key2} }

// topic finds the topic a data-plane request names ([router.Router.FindTopicName]: in
// cluster mode one created on another node a moment ago too) and reads its definition.
func (a *API) topic(ctx context.Context, name string) (*topic, error) {
	display, err := a.r.FindTopicName(ctx, name)
	if err != nil {
		return nil, err
	}
	spec, err := a.r.Topic(display)
	if err != nil {
		return nil, err
	}
	return &topic{name: display, spec: spec, schema: spec.Schema()}, nil
}

// writeTopicError answers a data-plane request whose topic a.topic did not find; notFound is
// the message of the 404 a request that passes without credentials (--insecure-dev) gets for
// a topic that does not exist.
func (a *API) writeTopicError(w http.ResponseWriter, req *http.Request, name string, err error, notFound string) {
	switch {
	case errors.Is(err, router.ErrTopicNotFound):
		// An unknown topic answers exactly as a known one does to credentials that do not
		// match its keys, so topic names cannot be probed without a key; only a request that
		// passes without credentials (--insecure-dev) learns that the topic does not exist.
		// (In cluster mode the answer may come after a shared read of the store, up to about a
		// second: its timing tells whether this node knew the name; see topiclookup.go.)
		// No key matches a topic without keys; the answer repeats the name as the request
		// wrote it, as authorize does for a known topic.
		if status, msg := a.authorize(req, name, nil); status != 0 {
			writeAuthError(w, status, msg)
			return
		}
		writeError(w, http.StatusNotFound, "NotFound", notFound)
	case req.Context().Err() != nil:
		// The client went away while the node waited for a read of the cluster's store:
		// nobody to answer.
	case errors.Is(err, router.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the server is shutting down; nothing was done: retry later")
	case errors.Is(err, router.ErrStoreDamaged):
		// The cluster's store was read, and what it holds for the topic is damaged: no
		// outage, so no Retry-After (retrying does not help). The cause goes to the log.
		a.log.Error("finding a topic this node does not know failed: the cluster's store holds damaged data", "topic", clip.String(name), "err", err)
		writeError(w, http.StatusInternalServerError, "InternalServerError", fmt.Sprintf("this node does not know topic %q and the cluster's store, which holds the topics created on other nodes, holds damaged data; nothing was done, and retrying does not help: the server log says what is damaged and what to do", clip.String(name)))
	default:
		// router.ErrUnavailable: the node does not know the topic, and the cluster's store,
		// which holds it if another node created it a moment ago, could not be read. Not a
		// 401: Azure's SDKs do not retry that, and the topic may well exist. The store's own
		// error goes to the log only, as elsewhere.
		a.log.Error("finding a topic this node does not know failed: the cluster's store could not be read", "topic", clip.String(name), "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("this node does not know topic %q and the cluster's store, which holds the topics created on other nodes, could not be read; nothing was done: retry later; the server log has the cause", clip.String(name)))
	}
}

func (a *API) publishHTTP(w http.ResponseWriter, req *http.Request, name string, namespace bool) {
	t, err := a.topic(req.Context(), name)
	if err != nil {
		a.writeTopicError(w, req, name, err, fmt.Sprintf("topic %q does not exist: create it first (egrid topic create --name %s)", clip.String(name), clip.String(name)))
		return
	}
	if status, msg := a.authorize(req, name, t.keys()); status != 0 {
		a.r.CountPublishFailure(t.name, authCode(status))
		writeAuthError(w, status, msg)
		return
	}
	if !namespace && a.namespaceOnClassicRoute(t.spec) {
		a.r.CountPublishFailure(t.name, "BadRequest")
		writeNamespaceOnClassicRoute(w, t.name)
		return
	}
	if enc := contentEncoding(req); enc != "" {
		a.r.CountPublishFailure(t.name, "UnsupportedMediaType")
		writeError(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType", fmt.Sprintf("the body is sent with Content-Encoding %q, which egrid does not decode; nothing was accepted: send the body uncompressed, without Content-Encoding", clip.String(enc)))
		return
	}
	lim := schemas.ClassicLimits
	if namespace || t.spec.Kind == router.KindNamespace {
		lim = schemas.NamespaceLimits
	}
	if req.ContentLength > int64(lim.MaxRequestBytes) {
		a.r.CountPublishFailure(t.name, "PayloadTooLarge")
		writeError(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge", fmt.Sprintf("the request body is %d bytes; the limit is %d bytes (1 MB): split the request", req.ContentLength, lim.MaxRequestBytes))
		return
	}
	release, answered, ok := a.admitBodyOf(w, req)
	if !ok {
		if answered {
			// Every publish slot is taken (--max-publish-bodies): 429. Counted here, where
			// the request has passed authentication and its topic exists, so the series stay
			// bounded by the topics.
			a.r.CountPublishFailure(t.name, "TooManyRequests")
		}
		return
	}
	defer release()
	body, buf, err := readBody(req, lim.MaxRequestBytes)
	defer bufpool.Put(buf)
	if err != nil {
		a.r.CountPublishFailure(t.name, "BadRequest")
		writeError(w, http.StatusBadRequest, "BadRequest", "reading the request body: "+err.Error())
		return
	}
	if len(body) > lim.MaxRequestBytes {
		a.r.CountPublishFailure(t.name, "PayloadTooLarge")
		writeError(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge", fmt.Sprintf("the request body is over the limit of %d bytes (1 MB): split the request", lim.MaxRequestBytes))
		return
	}
	evs, err := a.decodeHTTP(req, t, body, namespace, lim)
	if err != nil {
		a.r.CountPublishFailure(t.name, writeDecodeError(w, err))
		return
	}
	if err := a.r.PublishEvents(req.Context(), t.name, evs); err != nil {
		if errors.Is(err, router.ErrClosed) {
			writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the server is shutting down; nothing was accepted: retry later")
			return
		}
		// The store's error is logged by the committer; it can name files on the server, so
		// the answer does not carry it.
		w.Header().Set("Retry-After", "1")
		if errors.Is(err, router.ErrInsufficientStorage) {
			// Below the free-space floor, or the store failed a write on a full disk.
			writeError(w, http.StatusInsufficientStorage, "InsufficientStorage", insufficientStorage+" and none of the events was accepted: retry later; "+freeSpace)
			return
		}
		if errors.Is(err, router.ErrStoreDamaged) {
			// Retrying does not help: the answer says what does, as the server's log does;
			// 500 without Retry-After, as every answer to damage in the store.
			w.Header().Del("Retry-After")
			writeError(w, http.StatusInternalServerError, "InternalServerError", fmt.Sprintf("none of the events was accepted: the stored journal of topic %q is damaged (its newest entries are in a damaged block of the store, and a new event could not be read back), so retrying does not help: delete the topic and create it again (its subscriptions with it), or restore the server's data directory from a backup; egrid store check lists the damage", clip.String(t.name)))
			return
		}
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the events could not be made durable and none was accepted: retry later")
		return
	}
	if namespace {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("{}"))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// AdmitBodies bounds the publishes and the settle operations of pull delivery, the data
// plane's requests with bodies, with admit, which takes a slot for a request about to read
// its body or answers w itself (429) and returns ok false: the Admit of a BodyLimit of
// package router/httpserver. A request is admitted only once it has passed every check that
// needs no body: its credentials, and that its topic (and, for a settle, its event
// subscription) exists — which in cluster mode may wait for a read of the cluster's store. So
// requests with a wrong key (or none, without --insecure-dev) never hold a slot: they are
// answered 401 even when the bound is full, and cannot take a slot from a publisher with the
// key. A publish answered 429 counts in its topic's PublishFailCount as TooManyRequests.
// Call it before the API serves; without it the bodies are not bounded here.
func (a *API) AdmitBodies(admit func(w http.ResponseWriter, req *http.Request) (release func(), ok bool)) {
	a.admitBody = admit
}

// admitBodyOf takes a slot for req, about to read its body (AdmitBodies); ok false means req
// must not go on, and answered tells whether w was answered (429: no slot came free) or the
// client went away without an answer.
func (a *API) admitBodyOf(w http.ResponseWriter, req *http.Request) (release func(), answered, ok bool) {
	if a.admitBody == nil {
		return func() {}, false, true
	}
	aw := &answerWatch{ResponseWriter: w}
	release, ok = a.admitBody(aw, req)
	return release, aw.answered, ok
}

// answerWatch is a ResponseWriter that notes whether anything was written to it.
type answerWatch struct {
	http.ResponseWriter
	answered bool
}

func (w *answerWatch) WriteHeader(code int) {
	w.answered = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWatch) Write(b []byte) (int, error) {
	w.answered = true
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the ResponseWriter underneath.
func (w *answerWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// contentEncoding returns the request's Content-Encoding when it names a coding other than
// identity, or "". egrid reads request bodies (publish, definitions, settle, replay) as they
// come: a compressed one would fail to parse as JSON with a misleading syntax error, or, in
// binary mode, be kept as the event's data and delivered without its coding — bytes the
// publisher never meant as the data.
func contentEncoding(req *http.Request) string {
	for _, v := range req.Header.Values("Content-Encoding") {
		for _, coding := range strings.Split(v, ",") {
			if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
				return strings.Join(req.Header.Values("Content-Encoding"), ", ")
			}
		}
	}
	return ""
}

// writeEncodingError answers a request whose body comes with the Content-Encoding enc
// (contentEncoding) with 415: egrid does not decode it, and would otherwise refuse the
// compressed bytes as JSON that is not valid, a syntax error that names no cause.
func writeEncodingError(w http.ResponseWriter, enc string) {
	writeError(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType", fmt.Sprintf("the body is sent with Content-Encoding %q, which egrid does not decode; nothing was done: send the body uncompressed, without Content-Encoding", clip.String(enc)))
}

// writeAuthError answers a refused publish: 401 Unauthorized, 400 BadRequest for a SAS
// token that does not parse, or 403 Forbidden for a request without credentials that
// --insecure-dev lets in only from this machine's own programs (package devguard).
func writeAuthError(w http.ResponseWriter, status int, msg string) {
	writeError(w, status, authCode(status), msg)
}

// authCode is the error code of a refused publish's status: Unauthorized, BadRequest for a
// SAS token that does not parse, or Forbidden.
func authCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequest"
	case http.StatusForbidden:
		return "Forbidden"
	}
	return "Unauthorized"
}

// decodeHTTP picks the decoder from the topic's input schema and the request's Content-Type.
func (a *API) decodeHTTP(req *http.Request, t *topic, body []byte, namespace bool, lim schemas.Limits) ([]*schemas.Event, error) {
	ct := req.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	if namespace && t.schema != schemas.CloudEvents {
		return nil, &schemas.ValidationError{Index: -1, Field: "", Reason: fmt.Sprintf("topic %q takes %s; :publish is for CloudEvents topics: post to /topics/%s/api/events", t.name, t.schema, t.name)}
	}
	switch t.schema {
	case schemas.CloudEvents:
		binary := req.Header.Get("ce-specversion") != "" && mt != "application/cloudevents+json" && mt != "application/cloudevents-batch+json"
		if binary && !namespace && t.spec.Kind != router.KindNamespace {
			// Azure documents binary content mode for namespace topics only (:publish,
			// eventgrid-behaviour.md §1.3, §11.18); a custom topic's /api/events takes
			// structured events. Refused with what to send instead, rather than the body
			// taken as an event's data. A namespace topic on the classic route
			// (--any-api-version) takes what its :publish takes.
			return nil, &schemas.ValidationError{Index: -1, Field: "ce-specversion", Reason: fmt.Sprintf(
				"binary content mode (the attributes in ce-* headers, the data as the body) is not taken on the classic route /topics/%s/api/events, as on Azure, and nothing was accepted: "+
					"send the event in structured mode, as JSON with Content-Type application/cloudevents+json, or events in a JSON array with application/cloudevents-batch+json; "+
					"or post it in binary mode to /topics/%s:publish?api-version=%s", t.name, t.name, namespaceAPIVersions[1])}
		}
		switch {
		case binary:
			// Binary mode: the attributes are ce-* headers, the body is the data. An attribute
			// sent in two headers has no one value (the CloudEvents HTTP binding gives each
			// attribute one header), so it is refused rather than one of them picked.
			attrs := make(map[string]string)
			var repeated []*schemas.ValidationError
			for k, v := range req.Header {
				lk := strings.ToLower(k)
				if !strings.HasPrefix(lk, "ce-") || len(v) == 0 {
					continue
				}
				if len(v) > 1 {
					repeated = append(repeated, &schemas.ValidationError{Index: 0, Field: clip.String(lk), Reason: fmt.Sprintf("is sent in %d headers: send each attribute in one ce- header, once", len(v))})
					continue
				}
				attrs[strings.TrimPrefix(lk, "ce-")] = v[0]
			}
			if len(repeated) > 0 {
				// Listed as a decode lists its problems: the first 20 by name, and a count
				// of them all, so a request of thousands of repeated headers is answered in
				// kilobytes.
				slices.SortFunc(repeated, func(a, b *schemas.ValidationError) int { return strings.Compare(a.Field, b.Field) })
				return nil, schemas.Problems(repeated)
			}
			ev, err := schemas.DecodeCloudEventBinary(attrs, ct, body, lim)
			if err != nil {
				return nil, err
			}
			return []*schemas.Event{ev}, nil
		case mt == "application/cloudevents+json" || mt == "application/cloudevents-batch+json" || mt == "application/json" || !namespace:
			// The classic route takes a JSON body whatever its Content-Type says (see below).
			return a.r.DecodeEvents(t.name, t.spec, body, lim)
		}
		return nil, contentTypeError(ct, "application/cloudevents+json, application/cloudevents-batch+json, or binary mode with ce-* headers")
	default:
		// Azure delivers a classic publish whose body parses as the topic's schema whatever
		// its Content-Type: Microsoft's quickstart posts with `curl -d`, which sends
		// application/x-www-form-urlencoded (learn.microsoft.com/azure/event-grid/custom-event-quickstart).
		// So egrid does not look at the Content-Type here; a body that does not parse gets the
		// decoder's own error.
		return a.r.DecodeEvents(t.name, t.spec, body, lim)
	}
}

func contentTypeError(got, want string) error {
	if got == "" {
		got = "(none)"
	}
	return &schemas.ValidationError{Index: -1, Field: "Content-Type", Reason: fmt.Sprintf("%s is not accepted by this topic: send %s", clip.String(got), want)}
}

// codeInputJSONInvalid is the detail code of Azure's 400 answer to a publish whose body does
// not match the topic's schema (an Azure response quoted in microsoft/onefuzz#3285:
// {"error":{"code":"BadRequest",...,"details":[{"code":"InputJsonInvalid",...}]}}).
const codeInputJSONInvalid = "InputJsonInvalid"

// writeDecodeError maps decoding errors to Event Grid's statuses: 413 for size, 400 otherwise
// (it returns the error code it answered), with one detail per problem listed. A decode lists
// its first 20 problems (as the admin API does, see maxProblems) and counts them all
// (*schemas.ProblemsError): the message gives the count and how many events have problems.
func writeDecodeError(w http.ResponseWriter, err error) string {
	var tooLarge *schemas.TooLargeError
	if errors.As(err, &tooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge", tooLarge.Error())
		return "PayloadTooLarge"
	}
	var details []errorDetail
	for _, e := range flatten(err) {
		details = append(details, errorDetail{Code: codeInputJSONInvalid, Message: e.Error()})
	}
	msg := err.Error()
	if len(details) > 1 {
		total, events := len(details), 0
		var pe *schemas.ProblemsError
		if errors.As(err, &pe) {
			total, events = pe.Total, pe.Events
		}
		msg = fmt.Sprintf("%d problems in the request", total)
		if events > 1 {
			msg += fmt.Sprintf(", in %d events", events)
		}
		if total > len(details) {
			msg += fmt.Sprintf("; the first %d are listed as details", len(details))
		}
		msg += "; nothing was accepted: " + details[0].Message
	}
	writeError(w, http.StatusBadRequest, "BadRequest", msg, details...)
	return "BadRequest"
}

// authorize checks a publish's credentials (SPEC §1.1) against keys, the keys of the topic the
// request names as name (none for a topic that does not exist). It returns 0 when the request
// may go on, or a status (401, also for an aeg-sas-key query parameter given twice; 400 for a
// SAS token or a query string that does not parse; 403 for a request without credentials
// under InsecureDev that does not come from this machine's own programs: [devguard.Check])
// and a message that says what to do. The message repeats the topic's name as the request
// wrote it, never as the topic was created: names match ignoring case, and the stored
// spelling would tell a client without a key that the topic exists (writeTopicError).
func (a *API) authorize(req *http.Request, name string, keys []string) (int, string) {
	name = clip.String(name)
	authz := req.Header.Get("Authorization")
	q, err := strictQuery(req)
	if err != nil {
		// A URL that does not parse is malformed whatever its credentials: 400, before any
		// key is compared, so it tells nothing about the topic.
		return http.StatusBadRequest, err.Error()
	}
	queryKey, queryKeyErr := onceQuery(q, "aeg-sas-key")
	switch {
	case req.Header.Get("aeg-sas-key") != "":
		if sas.KeyMatches(req.Header.Get("aeg-sas-key"), keys) {
			return 0, ""
		}
		return http.StatusUnauthorized, "the aeg-sas-key header does not match key1 or key2 of topic " + name + ": get the keys with egrid topic key list or POST /admin/topics/" + name + "/listKeys"
	case queryKeyErr != nil:
		// Two keys are not tried in turn (the first would win and the other go unseen): the
		// request is refused as a key that does not match is, 401 with the same body, which
		// Event Grid clients treat as a credentials problem and do not retry.
		return http.StatusUnauthorized, queryKeyErr.Error() + ": send the key of topic " + name + " once, in the aeg-sas-key header or query parameter"
	case queryKey != "":
		if sas.KeyMatches(queryKey, keys) {
			return 0, ""
		}
		return http.StatusUnauthorized, "the aeg-sas-key query parameter does not match key1 or key2 of topic " + name
	case req.Header.Get("aeg-sas-token") != "" || hasScheme(authz, "SharedAccessSignature"):
		token := req.Header.Get("aeg-sas-token")
		if token == "" {
			token = authz
		}
		if err := sas.Verify(token, req.URL.Path, keys, a.r.Now()); err != nil {
			if errors.Is(err, sas.ErrMalformed) {
				// Azure answers a token that does not parse (a plain key in aeg-sas-token,
				// say) with 400 and this text; a well-formed token that does not verify is a
				// 401. The format is the one the Learn page on SAS authentication describes
				// (learn.microsoft.com/azure/event-grid/authenticate-with-access-keys-shared-access-signatures).
				return http.StatusBadRequest, "Invalid key in aeg-sas-token. Valid format: r=UrlEncodedResource&e=UrlEncodedUtcExpiration&s=UrlEncodedSignature (" + err.Error() + "; a topic key goes in aeg-sas-key)"
			}
			return http.StatusUnauthorized, "the SAS token is not valid for topic " + name + ": " + err.Error()
		}
		return 0, ""
	case hasScheme(authz, "SharedAccessKey"):
		if sas.KeyMatches(strings.TrimSpace(authz[len("SharedAccessKey"):]), keys) {
			return 0, ""
		}
		return http.StatusUnauthorized, "the SharedAccessKey does not match key1 or key2 of topic " + name
	case hasScheme(authz, "Bearer"):
		return http.StatusUnauthorized, "Microsoft Entra ID tokens are not supported: authenticate with aeg-sas-key, a SAS token or Authorization: SharedAccessKey"
	}
	if a.cfg.InsecureDev {
		// Without credentials only from this machine's own programs: not from a web page
		// (package devguard).
		if err := devguard.Check(req, a.cfg.PublicURL); err != nil {
			return http.StatusForbidden, err.Error()
		}
		return 0, ""
	}
	return http.StatusUnauthorized, "the request has no credentials: send the topic key in the aeg-sas-key header (or a SAS token in aeg-sas-token), or run the server with --insecure-dev for local development"
}

func hasScheme(authz, scheme string) bool {
	return len(authz) > len(scheme) && strings.EqualFold(authz[:len(scheme)], scheme) && authz[len(scheme)] == ' '
}
