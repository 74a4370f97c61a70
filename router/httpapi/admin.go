package httpapi

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/devguard"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/schemas/member"
)

func (a *API) adminRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/topics", a.admin(a.listTopics))
	mux.HandleFunc("PUT /admin/topics/{topic}", a.admin(a.putTopic))
	mux.HandleFunc("GET /admin/topics/{topic}", a.admin(a.getTopic))
	mux.HandleFunc("DELETE /admin/topics/{topic}", a.admin(a.deleteTopic))
	mux.HandleFunc("POST /admin/topics/{topic}/listKeys", a.admin(a.listKeys))
	mux.HandleFunc("GET /admin/topics/{topic}/eventSubscriptions", a.admin(a.listSubscriptions))
	mux.HandleFunc("PUT /admin/topics/{topic}/eventSubscriptions/{name}", a.admin(a.putSubscription))
	mux.HandleFunc("GET /admin/topics/{topic}/eventSubscriptions/{name}", a.admin(a.getSubscription))
	mux.HandleFunc("DELETE /admin/topics/{topic}/eventSubscriptions/{name}", a.admin(a.deleteSubscription))
	mux.HandleFunc("POST /admin/topics/{topic}/eventSubscriptions/{name}/endProbation", a.admin(a.endProbation))
	mux.HandleFunc("GET /admin/health", a.admin(a.getHealth))
	mux.HandleFunc("GET /admin/topics/{topic}/eventSubscriptions/{name}/events/{id}", a.admin(a.explainEvent))
	// The same with the id in the query (?id=), which carries any id: a browser removes a
	// path segment "." or ".." (also sent as %2E) before it sends the request.
	mux.HandleFunc("GET /admin/topics/{topic}/eventSubscriptions/{name}/events", a.admin(a.explainEvent))
	a.deadLetterRoutes(mux)
	// The validationUrl of a manual validation: no admin token, the URL's token is the
	// credential (SPEC §2.5).
	mux.HandleFunc("GET "+validationPath, a.handleValidationURL)
}

// admin wraps an admin handler with bearer-token authentication.
func (a *API) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		// A configured token is always required: InsecureDev only opens an admin API that
		// has none, and only to this machine's own programs, not to a web page (package
		// devguard).
		if a.cfg.InsecureDev && a.cfg.AdminToken == "" {
			if err := devguard.Check(req, a.cfg.PublicURL); err != nil {
				writeError(w, http.StatusForbidden, "Forbidden", err.Error())
				return
			}
		} else {
			if a.cfg.AdminToken == "" {
				writeError(w, http.StatusForbidden, "Forbidden", "the admin API is disabled: set adminToken in the server config (or run with --insecure-dev for local development)")
				return
			}
			got, ok := devguard.BearerToken(req)
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.AdminToken)) != 1 {
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

// maxARMBody bounds the body of an admin PUT: definitions are a few kilobytes.
const maxARMBody = 1 << 20

// armKind is what an ARM body of one resource type takes at its top level besides
// "properties": the members of Azure's REST resource (Microsoft.EventGrid topics and
// eventSubscriptions PUT bodies), accepted so that a body written for Azure, or read back
// from egrid, can be PUT unchanged, and ignored (egrid stores only the properties). Each is
// checked for the JSON Azure gives it, so a value of the wrong shape or a misspelt member is
// an error rather than a body taken without it.
type armKind struct {
	what    string // "a topic", named in messages
	members []armMember
}

// armMember is one top-level member of an ARM body: check says what is wrong with its value
// ("" when it is right; JSON null always is). A refused member is one whose every value but
// null is wrong: it is named so that its message says why, and not listed among those taken.
type armMember struct {
	name    string
	check   func(raw json.RawMessage) string
	refused bool
}

// The top-level members of a topic and of an event subscription. A topic's kind is the ARM
// resource kind, Azure or AzureArc (egrid serves Azure topics; a namespace topic is
// properties.kind), and extendedLocation belongs to AzureArc topics only.
var (
	topicARM = armKind{what: "a topic", members: []armMember{
		{name: "id", check: jsonString}, {name: "name", check: jsonString}, {name: "type", check: oneOf("Microsoft.EventGrid/topics")},
		{name: "location", check: jsonString}, {name: "tags", check: jsonTags}, {name: "identity", check: jsonObject}, {name: "sku", check: jsonObject},
		{name: "kind", check: topicResourceKind}, {name: "systemData", check: jsonObject}, {name: "extendedLocation", check: arcOnly},
	}}
	subscriptionARM = armKind{what: "an event subscription", members: []armMember{
		{name: "id", check: jsonString}, {name: "name", check: jsonString},
		{name: "type", check: oneOf("Microsoft.EventGrid/eventSubscriptions", "Microsoft.EventGrid/topics/eventSubscriptions")},
		// Azure's resource has no location, but ARM templates have sent one (Microsoft's own
		// event-grid quickstart template did, with api-version 2020-06-01) and Azure ignores
		// it: an event subscription lives where its topic does.
		{name: "location", check: jsonString},
		{name: "systemData", check: jsonObject},
		{name: "tags", check: noSubscriptionTags, refused: true},
	}}
)

// noSubscriptionTags refuses tags on an event subscription: Azure's resource has none, and
// egrid would drop them, so the labels a client meant to keep would be lost without a word.
func noSubscriptionTags(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	return "an event subscription has no tags (Azure's eventSubscriptions resource has none) and they would not be kept: leave them out, or put labels in properties.labels"
}

// names lists the members k takes besides properties, for a message.
func (k armKind) names() string {
	var names []string
	for _, m := range k.members {
		if !m.refused {
			names = append(names, m.name)
		}
	}
	return member.List(names)
}

// jsonShape names the JSON kind of a value, by its first byte.
func jsonShape(raw json.RawMessage) string {
	switch t := strings.TrimSpace(string(raw)); {
	case t == "":
		return "nothing"
	case t[0] == '{':
		return "an object"
	case t[0] == '[':
		return "an array"
	case t[0] == '"':
		return "a string"
	case t == "true" || t == "false":
		return "a boolean"
	case t == "null":
		return "null"
	}
	return "a number"
}

func isNull(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "null" }

func jsonString(raw json.RawMessage) string {
	if s := jsonShape(raw); s != "a string" && s != "null" {
		return "is " + s + "; send a string"
	}
	return ""
}

func jsonObject(raw json.RawMessage) string {
	if s := jsonShape(raw); s != "an object" && s != "null" {
		return "is " + s + "; send an object"
	}
	return ""
}

// jsonTags checks ARM tags: an object of string values.
func jsonTags(raw json.RawMessage) string {
	var tags map[string]json.RawMessage
	if jsonShape(raw) != "an object" || json.Unmarshal(raw, &tags) != nil {
		if isNull(raw) {
			return ""
		}
		return "is " + jsonShape(raw) + `; send an object of string values, {"env": "prod"}`
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if s := jsonShape(tags[k]); s != "a string" {
			return fmt.Sprintf("%s is %s; send a string", clip.Quote(k), s)
		}
	}
	return ""
}

// oneOf checks a string member that takes one of values, matched ignoring case as ARM does.
func oneOf(values ...string) func(json.RawMessage) string {
	return func(raw json.RawMessage) string {
		if msg := jsonString(raw); msg != "" || isNull(raw) {
			return msg
		}
		var v string
		_ = json.Unmarshal(raw, &v)
		for _, want := range values {
			if strings.EqualFold(v, want) {
				return ""
			}
		}
		return fmt.Sprintf("%s is not this resource's type: send %s, or leave it out", clip.Quote(v), strings.Join(values, " or "))
	}
}

// topicResourceKind checks a topic's ARM kind: Azure, the only kind egrid serves.
func topicResourceKind(raw json.RawMessage) string {
	if msg := oneOf("Azure")(raw); msg != "" {
		if jsonShape(raw) != "a string" {
			return msg
		}
		var v string
		_ = json.Unmarshal(raw, &v)
		return fmt.Sprintf(`%s is not a kind egrid serves: send Azure, or leave it out (a namespace topic is {"properties": {"kind": "namespace"}})`, clip.Quote(v))
	}
	return ""
}

// arcOnly refuses extendedLocation, which places an AzureArc topic on a Kubernetes cluster.
func arcOnly(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	return "places an Azure Arc topic, which egrid does not serve: leave it out"
}

// readARM decodes an ARM body {"properties": {...}} of kind k strictly, so a misspelt
// property is an error, at the top level too: the body must be a JSON object (an empty body
// is {}), and each member other than properties one of k's, of the JSON Azure gives it. A
// body over maxARMBody is refused whole, not cut at the limit and then reported as malformed
// (or, when the cut happened to leave valid JSON, taken without its rest).
func readARM[P any](w http.ResponseWriter, req *http.Request, k armKind, props *P) bool {
	_, ok := readARMProperties(w, req, k, props)
	return ok
}

// readARMProperties is [readARM] that also returns the body's properties as sent (nil when
// the body has none), for checks that must tell a member sent as 0 from one left out.
func readARMProperties[P any](w http.ResponseWriter, req *http.Request, k armKind, props *P) (json.RawMessage, bool) {
	if enc := contentEncoding(req); enc != "" {
		writeEncodingError(w, enc)
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxARMBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", "reading the request body: "+shortBody(err, len(body), req.ContentLength).Error())
		return nil, false
	}
	if len(body) > maxARMBody {
		writeError(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge", "the body is over the limit of 1 MB for a definition: send only the ARM resource {\"properties\": {...}}")
		return nil, false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	if err := checkStrictJSON(body, "the definition"); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
		return nil, false
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			writeError(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf(`the body is %s: send %s as a JSON object, {"properties": {...}}`, jsonShape(body), k.what))
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "BadRequest", "the body is not valid JSON: "+jsonProblem(err)+`; send {"properties": {...}}`)
		return nil, false
	}
	if members == nil {
		writeError(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf(`the body is null: send %s as a JSON object, {"properties": {...}}`, k.what))
		return nil, false
	}
	var properties json.RawMessage
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(members)) {
		raw := members[name]
		if strings.EqualFold(name, "properties") { // encoding/json matches names ignoring case
			properties = raw
			continue
		}
		i := slices.IndexFunc(k.members, func(m armMember) bool { return strings.EqualFold(m.name, name) })
		if i < 0 {
			errs = append(errs, fmt.Errorf(`%s is not a member of %s's ARM body: send the definition in "properties" (%s are accepted too, and ignored)`, clip.Quote(name), k.what, k.names()))
			continue
		}
		if msg := k.members[i].check(raw); msg != "" {
			errs = append(errs, fmt.Errorf("%s: %s", k.members[i].name, msg))
		}
	}
	if len(errs) > 0 {
		writeProblems(w, errors.Join(errs...))
		return nil, false
	}
	if len(properties) == 0 || isNull(properties) {
		return properties, true
	}
	dec := json.NewDecoder(strings.NewReader(string(properties)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(props); err != nil {
		if isUnknownField(err) {
			// encoding/json names the first unknown member without saying where it is: each
			// is named by its JSON path, as a top-level one is.
			if found, total := unknownMembers(properties, reflect.TypeOf(props), "properties", maxProblems); total > 0 {
				lines := make([]string, len(found))
				for i, u := range found {
					lines[i] = u.Problem()
				}
				writeProblemLines(w, lines, total)
				return nil, false
			}
		}
		writeError(w, http.StatusBadRequest, "BadRequest", propertiesError(err, properties, props))
		return nil, false
	}
	return properties, true
}

// propertiesError says what is wrong with the properties of an ARM body, raw, decoded into
// v (see jsonValueError).
func propertiesError(err error, raw []byte, v any) string {
	return jsonValueError(err, raw, v, "properties")
}

// jsonValueError says what is wrong with the JSON raw, decoded into v, in its own terms:
// encoding/json names a value of the wrong type by egrid's Go types ("cannot unmarshal
// number into Go struct field TopicSpec.inputSchema of type string"), and a time that does
// not parse by Go's layout ("parsing time "bad" as "2006-01-02T15:04:05Z07:00"") without
// naming the member, which say nothing to a client; this names the member by its JSON path
// under root ("" for the body itself) and the JSON the client should send.
func jsonValueError(err error, raw []byte, v any, root string) string {
	if isUnknownField(err) {
		if found, total := unknownMembers(raw, reflect.TypeOf(v), root, 1); total > 0 {
			msg := found[0].Problem()
			if total > 1 {
				msg += fmt.Sprintf("; and %d more members it does not take", total-1)
			}
			return msg
		}
	}
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		if path, val, ok := badTime(raw, reflect.TypeOf(v), root); ok {
			if jsonShape(val) == "a string" {
				return fmt.Sprintf("%s: %s is not a date and time: send one in RFC 3339 form, such as 2026-01-02T15:04:05Z", pathName(path), clip.String(string(val)))
			}
			return fmt.Sprintf(`%s: is %s; send a date and time as an RFC 3339 string, such as "2026-01-02T15:04:05Z"`, pathName(path), jsonShape(val))
		}
		if root == "" {
			return jsonProblem(err)
		}
		return root + ": " + jsonProblem(err)
	}
	path := root
	for _, seg := range strings.Split(te.Field, ".") {
		// An embedded Go struct shows as its type name (SubscriptionSpec); JSON names
		// start in lower case.
		if seg != "" && !(seg[0] >= 'A' && seg[0] <= 'Z') {
			path = joinPath(path, seg)
		}
	}
	return fmt.Sprintf("%s: is a JSON %s; send %s", pathName(path), clip.String(te.Value), jsonKind(te.Type))
}

func joinPath(path, seg string) string {
	if path == "" {
		return seg
	}
	return path + "." + seg
}

// pathName is a JSON path for a message: "the body" for the body itself.
func pathName(path string) string {
	if path == "" {
		return "the body"
	}
	return clip.String(path)
}

var timeType = reflect.TypeFor[time.Time]()

// badTime finds the time.Time member of t (through structs, embedded ones and pointers) whose
// value in raw does not decode, and returns its JSON path under path and its value. Members
// are matched ignoring case, as encoding/json matches them.
func badTime(raw []byte, t reflect.Type, path string) (string, json.RawMessage, bool) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == nil:
		return "", nil, false
	case t == timeType:
		var tm time.Time
		if tm.UnmarshalJSON(raw) != nil {
			return path, raw, true
		}
		return "", nil, false
	case t.Kind() != reflect.Struct:
		return "", nil, false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return "", nil, false
	}
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || (f.Anonymous && name == "") {
			continue // an embedded struct's fields are among the visible ones
		}
		if name == "" {
			name = f.Name
		}
		for k, v := range members {
			if strings.EqualFold(k, name) {
				if p, val, ok := badTime(v, f.Type, joinPath(path, name)); ok {
					return p, val, true
				}
			}
		}
	}
	return "", nil, false
}

// jsonKind is the JSON a Go type takes, for a message.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "the value the property's documentation names"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "an object"
}

// topicView is what reads return: the spec without its keys.
type topicView struct {
	router.TopicSpec
	Endpoint          string `json:"endpoint"`
	ProvisioningState string `json:"provisioningState"`
}

func (a *API) topicResource(req *http.Request, name string, spec router.TopicSpec) armResource[topicView] {
	if display, err := a.r.TopicName(name); err == nil {
		name = display // as first created
	}
	spec.Key1, spec.Key2 = "", ""
	return armResource[topicView]{
		ID: a.r.TopicID(name), Name: name, Type: "Microsoft.EventGrid/topics",
		Properties: topicView{TopicSpec: spec, Endpoint: a.topicEndpoint(req, name, spec), ProvisioningState: "Succeeded"},
	}
}

// topicEndpoint is the publish URL a topic read shows: under [Config.PublicURL] when it is
// set; else under the request's scheme and Host when that host is trusted — a loopback name
// or address, by which only this machine reaches the server —; else the path alone, relative
// to the server's address. A Host header is whatever the client sent, so a read must not
// hand an arbitrary one back as the topic's endpoint. A namespace topic's is its :publish
// route, the classic one refusing it (namespaceOnClassicRoute).
func (a *API) topicEndpoint(req *http.Request, name string, spec router.TopicSpec) string {
	path := "/topics/" + name + "/api/events"
	if a.namespaceOnClassicRoute(spec) {
		path = "/topics/" + name + ":publish"
	}
	if a.cfg.PublicURL != "" {
		return strings.TrimRight(a.cfg.PublicURL, "/") + path
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

func (a *API) listTopics(w http.ResponseWriter, req *http.Request) {
	out := struct {
		Value []armResource[topicView] `json:"value"`
	}{Value: []armResource[topicView]{}}
	for _, name := range a.r.Topics() {
		if spec, err := a.r.Topic(name); err == nil {
			out.Value = append(out.Value, a.topicResource(req, name, spec))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// topicBody is what a topic PUT takes: the spec, plus the read-only properties a read returns,
// accepted and ignored so a topic read back can be PUT again unchanged (as ARM does, and as
// subscriptionBody does for event subscriptions).
type topicBody struct {
	router.TopicSpec
	Endpoint          json.RawMessage `json:"endpoint,omitempty"`
	ProvisioningState json.RawMessage `json:"provisioningState,omitempty"`
}

func (a *API) putTopic(w http.ResponseWriter, req *http.Request) {
	var body topicBody
	if !readARM(w, req, topicARM, &body) {
		return
	}
	name := req.PathValue("topic")
	_, existed := a.r.Topic(name)
	saved, err := a.r.CreateTopic(req.Context(), name, body.TopicSpec)
	if err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	status := http.StatusCreated
	if existed == nil {
		status = http.StatusOK
	}
	writeJSON(w, status, a.topicResource(req, name, saved))
}

func (a *API) getTopic(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("topic")
	spec, err := a.r.Topic(name)
	if err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	writeJSON(w, http.StatusOK, a.topicResource(req, name, spec))
}

func (a *API) deleteTopic(w http.ResponseWriter, req *http.Request) {
	if err := a.r.DeleteTopic(req.Context(), req.PathValue("topic")); err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *API) listKeys(w http.ResponseWriter, req *http.Request) {
	spec, err := a.r.Topic(req.PathValue("topic"))
	if err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"key1": spec.Key1, "key2": spec.Key2})
}

// subscriptionView is what reads return: the spec without its secrets (see
// [router.SubscriptionSpec.redacted]), its provisioning state and its delivery state.
type subscriptionView struct {
	router.SubscriptionSpec
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
	router.SubscriptionSpec
	Topic               json.RawMessage `json:"topic,omitempty"`
	ProvisioningState   json.RawMessage `json:"provisioningState,omitempty"`
	ProvisioningMessage json.RawMessage `json:"provisioningMessage,omitempty"`
	DeliveryState       json.RawMessage `json:"deliveryState,omitempty"`
}

// deliveryState is egrid's addition to a subscription read. While the subscription's actor
// still reads its stored state it is only {"loading": true, "loadingSince": …}: the delivery
// state is not known yet, and zeros would read as an idle, healthy subscription.
type deliveryState struct {
	Backlog                     int       `json:"backlog"`
	InFlight                    int       `json:"inFlight"`
	OldestUndeliveredAgeSeconds float64   `json:"oldestUndeliveredAgeSeconds"`
	Probation                   bool      `json:"probation"`
	ProbationUntil              time.Time `json:"probationUntil,omitzero"`
	ProbationCause              string    `json:"probationCause,omitempty"`
	Loading                     bool      `json:"-"`
	LoadingSince                time.Time `json:"-"`
}

// MarshalJSON writes the loading form while Loading, else the fields.
func (d *deliveryState) MarshalJSON() ([]byte, error) {
	if d.Loading {
		return json.Marshal(struct {
			Loading      bool      `json:"loading"`
			LoadingSince time.Time `json:"loadingSince,omitzero"`
		}{true, d.LoadingSince})
	}
	type fields deliveryState // without the method
	return json.Marshal((*fields)(d))
}

func (a *API) subscriptionResource(req *http.Request, topic, name string, spec router.SubscriptionSpec, withState bool) armResource[subscriptionView] {
	if tn, sn, err := a.r.SubscriptionName(topic, name); err == nil {
		topic, name = tn, sn // as first created
	}
	view := spec.Redacted()
	if t, err := a.r.Topic(topic); err == nil {
		view = view.WithDefaults(t) // as Azure's reads show them
	}
	v := subscriptionView{SubscriptionSpec: view, Topic: a.r.TopicID(topic), ProvisioningState: router.StateSucceeded}
	if p, err := a.r.Provisioning(topic, name); err == nil {
		v.ProvisioningState, v.ProvisioningMessage = p.State, p.Message
	}
	if withState && v.ProvisioningState == router.StateSucceeded {
		if st, err := a.r.Status(req.Context(), topic, name); err == nil && st.Loading {
			v.DeliveryState = &deliveryState{Loading: true, LoadingSince: st.LoadingSince}
		} else if err == nil {
			ds := &deliveryState{Backlog: st.Backlog, InFlight: st.InFlight, Probation: st.Probation.Active}
			if !st.OldestUndelivered.IsZero() {
				ds.OldestUndeliveredAgeSeconds = a.r.Now().Sub(st.OldestUndelivered).Seconds()
			}
			if st.Probation.Active {
				ds.ProbationUntil, ds.ProbationCause = st.Probation.Until, st.Probation.Cause.String()
			}
			v.DeliveryState = ds
		}
	}
	return armResource[subscriptionView]{
		ID: a.r.TopicID(topic) + "/providers/Microsoft.EventGrid/eventSubscriptions/" + name, Name: name,
		Type: "Microsoft.EventGrid/eventSubscriptions", Properties: v,
	}
}

func (a *API) listSubscriptions(w http.ResponseWriter, req *http.Request) {
	topic := req.PathValue("topic")
	names, err := a.r.Subscriptions(topic)
	if err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	out := struct {
		Value []armResource[subscriptionView] `json:"value"`
	}{Value: []armResource[subscriptionView]{}}
	for _, n := range names {
		if spec, err := a.r.Subscription(topic, n); err == nil {
			out.Value = append(out.Value, a.subscriptionResource(req, topic, n, spec, false))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// putSubscription creates or replaces a subscription. The validationUrl of its handshake
// points at Config.PublicURL, or else at the scheme and Host this request came to.
func (a *API) putSubscription(w http.ResponseWriter, req *http.Request) {
	var body subscriptionBody
	properties, ok := readARMProperties(w, req, subscriptionARM, &body)
	if !ok {
		return
	}
	topic, name := req.PathValue("topic"), req.PathValue("name")
	if t, err := a.r.Topic(topic); err == nil { // an unknown topic is answered 404 below
		if err := explicitZeros(properties, &body.SubscriptionSpec, t); err != nil {
			writeProblems(w, err)
			return
		}
	}
	_, existed := a.r.Subscription(topic, name)
	base := a.cfg.PublicURL
	if base == "" {
		scheme := "http"
		if req.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + req.Host
	}
	if _, err := a.r.PutSubscription(req.Context(), topic, name, body.SubscriptionSpec, base); err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	spec, err := a.r.Subscription(topic, name)
	if err != nil { // deleted meanwhile
		a.writeAdminError(w, req, err)
		return
	}
	status := http.StatusCreated
	if existed == nil {
		status = http.StatusOK
	}
	writeJSON(w, status, a.subscriptionResource(req, topic, name, spec, false))
}

func (a *API) getSubscription(w http.ResponseWriter, req *http.Request) {
	topic, name := req.PathValue("topic"), req.PathValue("name")
	spec, err := a.r.FindSubscription(req.Context(), topic, name)
	if err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	writeJSON(w, http.StatusOK, a.subscriptionResource(req, topic, name, spec, true))
}

func (a *API) deleteSubscription(w http.ResponseWriter, req *http.Request) {
	if err := a.r.DeleteSubscription(req.Context(), req.PathValue("topic"), req.PathValue("name")); err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *API) endProbation(w http.ResponseWriter, req *http.Request) {
	topic, name := req.PathValue("topic"), req.PathValue("name")
	if _, err := a.r.EndProbation(req.Context(), topic, name); err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	spec, err := a.r.Subscription(topic, name)
	if err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	writeJSON(w, http.StatusOK, a.subscriptionResource(req, topic, name, spec, true))
}

// explainEvent answers an event's delivery history ([router.Router.Explain]): 404 with the
// event id in the message for an event the subscription has no history of, 503 when the store
// cannot read it, 500 when it is stored damaged or the store finds it damaged (retrying does
// not help: the message says to run egrid store check).
func (a *API) explainEvent(w http.ResponseWriter, req *http.Request) {
	id, ok := explainID(req)
	if !ok {
		writeError(w, http.StatusBadRequest, "BadRequest", "explaining an event needs its id: GET …/events/{id}, or …/events?id={id} once (an id that is \".\" or \"..\" goes in the query)")
		return
	}
	e, err := a.r.Explain(req.Context(), req.PathValue("topic"), req.PathValue("name"), id)
	if err != nil {
		a.writeAdminError(w, req, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// explainID returns the event id an explain call names: in its path (…/events/{id}) or, on
// …/events, in its one id query parameter; ok is false when the query gives none, an empty
// one or several.
func explainID(req *http.Request) (id string, ok bool) {
	if !strings.HasSuffix(req.Pattern, "/events") {
		id = req.PathValue("id")
		return id, id != ""
	}
	ids := req.URL.Query()["id"]
	if len(ids) != 1 || ids[0] == "" {
		return "", false
	}
	return ids[0], true
}

// storeDamaged is the message of a 500 answering [router.ErrStoreDamaged].
const storeDamaged = "data in the store that the call needs is damaged and the call was not carried out; retrying does not help: the server log says what is damaged and what to do (restore the store from a backup, or delete the topic or event subscription it names and create it again); egrid store check reports damage in the embedded store"

// The parts of a 507 answer: what is wrong, for both ways to it (the disk below the store's
// free-space floor, or a write the store failed on a full disk), and what to do.
const (
	insufficientStorage = "the disk holding the store is full or below its free-space floor"
	freeSpace           = "the operator frees disk space (GET /admin/health shows what is free)"
)

// callAttrs returns the log attributes of what an admin call is about, as its path (and an
// explain call's id query parameter, explainID) names them: the topic, the subscription and
// the event. Every line about them carries them (router/logattr), so that the log tells two
// events' failures apart and does not fold them.
func callAttrs(req *http.Request) []any {
	var out []any
	for _, p := range [...]struct{ wildcard, key string }{{"topic", logattr.Topic}, {"name", logattr.Subscription}} {
		if v := req.PathValue(p.wildcard); v != "" {
			out = append(out, p.key, clip.String(v))
		}
	}
	if id, ok := explainID(req); ok {
		out = append(out, logattr.EventID, clip.String(id))
	}
	return out
}

// writeAdminError maps router errors to statuses; validation problems become one detail each.
// What it logs carries what req is about (callAttrs).
func (a *API) writeAdminError(w http.ResponseWriter, req *http.Request, err error) {
	switch {
	case errors.Is(err, router.ErrTopicNotFound), errors.Is(err, router.ErrSubscriptionNotFound), errors.Is(err, router.ErrEventNotFound):
		writeError(w, http.StatusNotFound, "NotFound", err.Error())
	case errors.Is(err, router.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error())
	case errors.Is(err, router.ErrSubscriptionLoading), errors.Is(err, router.ErrSubscriptionNotRunning):
		// The subscription is starting, or stopped as the call reached it: its message says
		// which, and to try again.
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error())
	case errors.Is(err, router.ErrDefinitionDamaged):
		// The name is taken by a damaged stored definition: the message names it and says
		// to delete it first (it names no file).
		writeError(w, http.StatusConflict, "Conflict", err.Error())
	case errors.Is(err, router.ErrDefinitionChanged):
		// A PUT of an event subscription that another request updated, deleted or created
		// while its endpoint was validated, or a delete of a damaged definition that another
		// node replaced meanwhile: nothing changed; the message says what did and what to do.
		writeError(w, http.StatusConflict, "Conflict", err.Error())
	case errors.Is(err, router.ErrStoreDamaged):
		// Not the request's fault, and no outage: a stored record the call needs is damaged
		// (in cluster mode, one the node read from the cluster's store). Retrying does not
		// help. The store's error can name files: it goes to the log only.
		a.log.Error("admin call failed: data it needs in the store is damaged", append(callAttrs(req), "err", err)...)
		writeError(w, http.StatusInternalServerError, "InternalServerError", storeDamaged)
	case errors.Is(err, router.ErrHistoryDamaged):
		// Not the request's fault: the stored record is damaged. The cause goes to the log.
		a.log.Error("explain: the event's stored delivery history is damaged", append(callAttrs(req), "err", err)...)
		writeError(w, http.StatusInternalServerError, "InternalServerError", "the event's stored delivery history is damaged and cannot be explained (its delivery is not affected): the server log has the cause; egrid store check reports damage in the store")
	case errors.Is(err, router.ErrInsufficientStorage):
		// The store failed a write on a full disk (it also wraps router.ErrUnavailable):
		// the operator frees space. Its own error names files: it goes to the log only.
		a.log.Error("admin call failed: the disk holding the store is full", append(callAttrs(req), "err", err)...)
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusInsufficientStorage, "InsufficientStorage", insufficientStorage+" and the call was not carried out: retry later; "+freeSpace)
	case errors.Is(err, router.ErrUnavailable):
		// The store's own error can name files on the server: it goes to the log only.
		a.log.Error("admin call failed: the store is unavailable", append(callAttrs(req), "err", err)...)
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the store could not carry out the call (save or delete a definition, read a delivery history): retry later; the server log has the cause")
	default:
		writeProblems(w, err)
	}
}

// maxProblems bounds the problems one answer lists, as a publish's decoders bound theirs: a
// 1 MB definition of 10 000 advanced filters has 20 000 problems, and listing each twice (the
// message and a detail) made a 25 MB answer. The first ones say what to fix; the count says
// how many there are.
const maxProblems = 20

// writeProblems answers 400 with the problems of a definition: one detail each, the first
// maxProblems of them, and a message listing those and counting the rest.
func writeProblems(w http.ResponseWriter, err error) {
	var lines []string
	for _, e := range flatten(err) {
		lines = append(lines, strings.Split(e.Error(), "\n")...)
	}
	writeProblemLines(w, lines, len(lines))
}

// writeProblemLines answers 400 with total problems, of which lines are the first (at least
// maxProblems of them when there are as many): one detail each for the first maxProblems, and
// a message listing those and counting the rest.
func writeProblemLines(w http.ResponseWriter, lines []string, total int) {
	shown := lines[:min(len(lines), maxProblems)]
	details := make([]errorDetail, len(shown))
	for i, line := range shown {
		details[i] = errorDetail{Code: "InvalidProperty", Message: line}
	}
	msg := strings.Join(shown, "; ")
	if total > 1 {
		msg = fmt.Sprintf("%d problems: %s", total, msg)
	}
	if more := total - len(shown); more > 0 {
		msg += fmt.Sprintf("; and %d more not listed here: fix these and send the definition again to see the rest", more)
	}
	writeError(w, http.StatusBadRequest, "BadRequest", msg, details...)
}
