package router

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

func (r *Router) adminRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/topics", r.admin(r.listTopics))
	mux.HandleFunc("PUT /admin/topics/{topic}", r.admin(r.putTopic))
	mux.HandleFunc("GET /admin/topics/{topic}", r.admin(r.getTopic))
	mux.HandleFunc("DELETE /admin/topics/{topic}", r.admin(r.deleteTopic))
	mux.HandleFunc("POST /admin/topics/{topic}/listKeys", r.admin(r.listKeys))
	mux.HandleFunc("GET /admin/topics/{topic}/eventSubscriptions", r.admin(r.listSubscriptions))
	mux.HandleFunc("PUT /admin/topics/{topic}/eventSubscriptions/{name}", r.admin(r.putSubscription))
	mux.HandleFunc("GET /admin/topics/{topic}/eventSubscriptions/{name}", r.admin(r.getSubscription))
	mux.HandleFunc("DELETE /admin/topics/{topic}/eventSubscriptions/{name}", r.admin(r.deleteSubscription))
	mux.HandleFunc("POST /admin/topics/{topic}/eventSubscriptions/{name}/endProbation", r.admin(r.endProbation))
	r.deadLetterRoutes(mux)
	// The validationUrl of a manual validation: no admin token, the URL's token is the
	// credential (SPEC §2.5).
	mux.HandleFunc("GET "+validationPath, r.handleValidationURL)
}

// admin wraps an admin handler with bearer-token authentication.
func (r *Router) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		// A configured token is always required: InsecureDev only opens an admin API that
		// has none.
		if !r.cfg.InsecureDev || r.cfg.AdminToken != "" {
			if r.cfg.AdminToken == "" {
				writeError(w, http.StatusForbidden, "Forbidden", "the admin API is disabled: set adminToken in the server config (or run with --insecure-dev for local development)")
				return
			}
			got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(r.cfg.AdminToken)) != 1 {
				writeError(w, http.StatusUnauthorized, "Unauthorized", "the admin API needs Authorization: Bearer <adminToken from the server config>")
				return
			}
		}
		h(w, req)
	}
}

// armResource is the ARM envelope of topics and event subscriptions.
type armResource[P any] struct {
	ID         string `json:"id,omitempty"`
	Name       string `json:"name,omitempty"`
	Type       string `json:"type,omitempty"`
	Properties P      `json:"properties"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// readARM decodes an ARM body {"properties": {...}} strictly, so a misspelt property is an error.
func readARM[P any](w http.ResponseWriter, req *http.Request, props *P) bool {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", "reading the request body: "+err.Error())
		return false
	}
	var env struct {
		ID         string          `json:"id"`
		Name       string          `json:"name"`
		Type       string          `json:"type"`
		Location   string          `json:"location"`
		Tags       map[string]any  `json:"tags"`
		Properties json.RawMessage `json:"properties"`
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, &env); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", "the body is not valid JSON: "+err.Error()+`; send {"properties": {...}}`)
		return false
	}
	if len(env.Properties) == 0 {
		return true
	}
	dec := json.NewDecoder(strings.NewReader(string(env.Properties)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(props); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", "properties: "+err.Error())
		return false
	}
	return true
}

// topicView is what reads return: the spec without its keys.
type topicView struct {
	TopicSpec
	Endpoint          string `json:"endpoint"`
	ProvisioningState string `json:"provisioningState"`
}

func (r *Router) topicResource(req *http.Request, name string, spec TopicSpec) armResource[topicView] {
	if display, err := r.TopicName(name); err == nil {
		name = display // as first created
	}
	spec.Key1, spec.Key2 = "", ""
	return armResource[topicView]{
		ID: r.TopicID(name), Name: name, Type: "Microsoft.EventGrid/topics",
		Properties: topicView{TopicSpec: spec, Endpoint: r.topicEndpoint(req, name), ProvisioningState: "Succeeded"},
	}
}

// topicEndpoint is the publish URL a topic read shows: under [Config.PublicURL] when it is
// set; else under the request's scheme and Host when that host is trusted — a loopback name
// or address, by which only this machine reaches the server —; else the path alone, relative
// to the server's address. A Host header is whatever the client sent, so a read must not
// hand an arbitrary one back as the topic's endpoint.
func (r *Router) topicEndpoint(req *http.Request, name string) string {
	path := "/topics/" + name + "/api/events"
	if r.cfg.PublicURL != "" {
		return strings.TrimRight(r.cfg.PublicURL, "/") + path
	}
	if !trustedHost(req.Host) {
		return path
	}
	scheme := "http"
	if req.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + req.Host + path
}

// trustedHost reports whether a Host header names this machine's loopback interface
// ("localhost", 127.0.0.0/8, ::1), with or without a port.
func trustedHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (r *Router) listTopics(w http.ResponseWriter, req *http.Request) {
	out := struct {
		Value []armResource[topicView] `json:"value"`
	}{Value: []armResource[topicView]{}}
	for _, name := range r.Topics() {
		if spec, err := r.Topic(name); err == nil {
			out.Value = append(out.Value, r.topicResource(req, name, spec))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (r *Router) putTopic(w http.ResponseWriter, req *http.Request) {
	var spec TopicSpec
	if !readARM(w, req, &spec) {
		return
	}
	name := req.PathValue("topic")
	_, existed := r.Topic(name)
	saved, err := r.CreateTopic(req.Context(), name, spec)
	if err != nil {
		r.writeAdminError(w, err)
		return
	}
	status := http.StatusCreated
	if existed == nil {
		status = http.StatusOK
	}
	writeJSON(w, status, r.topicResource(req, name, saved))
}

func (r *Router) getTopic(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("topic")
	spec, err := r.Topic(name)
	if err != nil {
		r.writeAdminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, r.topicResource(req, name, spec))
}

func (r *Router) deleteTopic(w http.ResponseWriter, req *http.Request) {
	if err := r.DeleteTopic(req.Context(), req.PathValue("topic")); err != nil {
		r.writeAdminError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (r *Router) listKeys(w http.ResponseWriter, req *http.Request) {
	spec, err := r.Topic(req.PathValue("topic"))
	if err != nil {
		r.writeAdminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"key1": spec.Key1, "key2": spec.Key2})
}

// subscriptionView is what reads return: the spec without its secrets (see
// [SubscriptionSpec.redacted]), its provisioning state and its delivery state.
type subscriptionView struct {
	SubscriptionSpec
	Topic             string `json:"topic"`
	ProvisioningState string `json:"provisioningState"`
	// ProvisioningMessage says why the state is not Succeeded (egrid).
	ProvisioningMessage string         `json:"provisioningMessage,omitempty"`
	DeliveryState       *deliveryState `json:"deliveryState,omitempty"`
}

// subscriptionBody is what a PUT takes: the spec, plus the read-only properties a read
// returns, accepted and ignored so a definition read back can be PUT again unchanged (as ARM
// does).
type subscriptionBody struct {
	SubscriptionSpec
	Topic               json.RawMessage `json:"topic,omitempty"`
	ProvisioningState   json.RawMessage `json:"provisioningState,omitempty"`
	ProvisioningMessage json.RawMessage `json:"provisioningMessage,omitempty"`
	DeliveryState       json.RawMessage `json:"deliveryState,omitempty"`
}

// deliveryState is egrid's addition to a subscription read.
type deliveryState struct {
	Backlog                     int       `json:"backlog"`
	InFlight                    int       `json:"inFlight"`
	OldestUndeliveredAgeSeconds float64   `json:"oldestUndeliveredAgeSeconds"`
	Probation                   bool      `json:"probation"`
	ProbationUntil              time.Time `json:"probationUntil,omitzero"`
	ProbationCause              string    `json:"probationCause,omitempty"`
}

func (r *Router) subscriptionResource(req *http.Request, topic, name string, spec SubscriptionSpec, withState bool) armResource[subscriptionView] {
	if tn, sn, err := r.SubscriptionName(topic, name); err == nil {
		topic, name = tn, sn // as first created
	}
	v := subscriptionView{SubscriptionSpec: spec.redacted(), Topic: r.TopicID(topic), ProvisioningState: StateSucceeded}
	if p, err := r.Provisioning(topic, name); err == nil {
		v.ProvisioningState, v.ProvisioningMessage = p.State, p.Message
	}
	if withState && v.ProvisioningState == StateSucceeded {
		if st, err := r.Status(req.Context(), topic, name); err == nil {
			ds := &deliveryState{Backlog: st.Backlog, InFlight: st.InFlight, Probation: st.Probation.Active}
			if !st.OldestUndelivered.IsZero() {
				ds.OldestUndeliveredAgeSeconds = r.deps.Now().Sub(st.OldestUndelivered).Seconds()
			}
			if st.Probation.Active {
				ds.ProbationUntil, ds.ProbationCause = st.Probation.Until, st.Probation.Cause.String()
			}
			v.DeliveryState = ds
		}
	}
	return armResource[subscriptionView]{
		ID: r.TopicID(topic) + "/providers/Microsoft.EventGrid/eventSubscriptions/" + name, Name: name,
		Type: "Microsoft.EventGrid/eventSubscriptions", Properties: v,
	}
}

func (r *Router) listSubscriptions(w http.ResponseWriter, req *http.Request) {
	topic := req.PathValue("topic")
	names, err := r.Subscriptions(topic)
	if err != nil {
		r.writeAdminError(w, err)
		return
	}
	out := struct {
		Value []armResource[subscriptionView] `json:"value"`
	}{Value: []armResource[subscriptionView]{}}
	for _, n := range names {
		if spec, err := r.Subscription(topic, n); err == nil {
			out.Value = append(out.Value, r.subscriptionResource(req, topic, n, spec, false))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// putSubscription creates or replaces a subscription. The validationUrl of its handshake
// points at Config.PublicURL, or else at the scheme and Host this request came to.
func (r *Router) putSubscription(w http.ResponseWriter, req *http.Request) {
	var body subscriptionBody
	if !readARM(w, req, &body) {
		return
	}
	topic, name := req.PathValue("topic"), req.PathValue("name")
	_, existed := r.Subscription(topic, name)
	base := r.cfg.PublicURL
	if base == "" {
		scheme := "http"
		if req.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + req.Host
	}
	if _, err := r.applySubscription(req.Context(), topic, name, body.SubscriptionSpec, base); err != nil {
		r.writeAdminError(w, err)
		return
	}
	spec, err := r.Subscription(topic, name)
	if err != nil { // deleted meanwhile
		r.writeAdminError(w, err)
		return
	}
	status := http.StatusCreated
	if existed == nil {
		status = http.StatusOK
	}
	writeJSON(w, status, r.subscriptionResource(req, topic, name, spec, false))
}

func (r *Router) getSubscription(w http.ResponseWriter, req *http.Request) {
	topic, name := req.PathValue("topic"), req.PathValue("name")
	spec, err := r.Subscription(topic, name)
	if err != nil {
		r.writeAdminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, r.subscriptionResource(req, topic, name, spec, true))
}

func (r *Router) deleteSubscription(w http.ResponseWriter, req *http.Request) {
	if err := r.DeleteSubscription(req.Context(), req.PathValue("topic"), req.PathValue("name")); err != nil {
		r.writeAdminError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (r *Router) endProbation(w http.ResponseWriter, req *http.Request) {
	topic, name := req.PathValue("topic"), req.PathValue("name")
	if _, err := r.EndProbation(req.Context(), topic, name); err != nil {
		r.writeAdminError(w, err)
		return
	}
	spec, err := r.Subscription(topic, name)
	if err != nil {
		r.writeAdminError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, r.subscriptionResource(req, topic, name, spec, true))
}

// writeAdminError maps router errors to statuses; validation problems become one detail each.
func (r *Router) writeAdminError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrTopicNotFound), errors.Is(err, ErrSubscriptionNotFound):
		writeError(w, http.StatusNotFound, "NotFound", err.Error())
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error())
	case errors.Is(err, ErrUnavailable):
		// The store's own error can name files on the server: it goes to the log only.
		r.log.Error("admin call failed: the store is unavailable", "err", err)
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the store could not save the change: retry later; the server log has the cause")
	default:
		var details []errorDetail
		for _, e := range flatten(err) {
			for _, line := range strings.Split(e.Error(), "\n") {
				details = append(details, errorDetail{Code: "InvalidProperty", Message: line})
			}
		}
		msg := err.Error()
		if len(details) > 1 {
			msg = fmt.Sprintf("%d problems: %s", len(details), strings.ReplaceAll(msg, "\n", "; "))
		}
		writeError(w, http.StatusBadRequest, "BadRequest", msg, details...)
	}
}
