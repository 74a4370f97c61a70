package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas/clip"
)

// The data-plane api-versions each route takes, as Azure serves them
// (eventgrid-behaviour.md §1.1 and §9):
//
//   - POST /topics/{topic}/api/events, classic publish: 2018-01-01, the only data-plane
//     version of Azure's EventGrid.json (what the classic SDKs and the Functions output
//     binding send).
//   - POST /topics/{topic}:publish and the pull routes (:receive, :acknowledge, :release,
//     :reject, :renewLock): 2023-11-01 and 2024-06-01, the versions of Azure's
//     EventGridNamespace TypeSpec (2024-06-01 is the namespace SDKs' default).
//
// A request without api-version is taken: curl users and scripts leave it out, and no
// response of Azure's to a missing api-version has been found to follow instead. One that
// names a version its route does not take is refused with 400 and the versions it takes. Azure
// answers a version its endpoint does not know with the message "Unknown api version": the
// classic EventGridPublisherClient and the Functions output binding, pointed at a namespace
// topic, post /topics/<t>/api/events?api-version=2018-01-01 and get it back
// (Azure/azure-sdk-for-net#43371, Azure/azure-sdk-for-java#39674,
// Azure/azure-functions-python-worker#1642). The status code is not in those reports nor in
// Microsoft's documentation; 400 is egrid's choice, as for every other request egrid refuses
// as malformed, and the error code is BadRequest.
//
// router.Config.AnyAPIVersion (egrid serve --any-api-version), an extension, turns the
// check off, and lets a namespace topic take the classic route too (publishHTTP).
var (
	classicAPIVersions   = []string{"2018-01-01"}
	namespaceAPIVersions = []string{"2023-11-01", "2024-06-01"}
)

// unknownAPIVersion is the start of the message of a request refused for its api-version,
// Azure's own words.
const unknownAPIVersion = "Unknown api version"

// checkAPIVersion answers req with 400 and returns false when its api-version query parameter
// is present and names a version other than versions, the ones its route (route, as the
// answer names it) takes. Given more than once, every value must be one of them: the
// parameter may repeat, as it always could. A query that does not parse is left to the
// route's own check (authorize), which refuses it with its own message.
func (a *API) checkAPIVersion(w http.ResponseWriter, req *http.Request, route string, versions []string) bool {
	if a.cfg.AnyAPIVersion {
		return true
	}
	q, err := strictQuery(req)
	if err != nil {
		return true
	}
	for _, v := range q["api-version"] {
		if slices.Contains(versions, v) {
			continue
		}
		msg := fmt.Sprintf("%s %q: %s takes api-version %s", unknownAPIVersion, clip.String(v), route, strings.Join(versions, " or "))
		switch {
		case slices.Contains(namespaceAPIVersions, v):
			msg += fmt.Sprintf(" (%s is a version of :publish and the pull routes, which a namespace topic takes: POST /topics/{topic}:publish?api-version=%s)", v, v)
		case slices.Contains(classicAPIVersions, v):
			msg += fmt.Sprintf(" (%s is the version of classic publish: POST /topics/{topic}/api/events?api-version=%s)", v, v)
		}
		writeError(w, http.StatusBadRequest, "BadRequest", msg+"; nothing was done: send one of those, or none (a server run with --any-api-version takes any)")
		return false
	}
	return true
}

// namespaceOnClassicRoute reports whether a publish on the classic route to the topic of
// spec is refused: a namespace topic takes :publish only. Azure serves a namespace topic
// from the namespace's host, which has no /api/events of version 2018-01-01: the classic
// clients pointed at it are answered "Unknown api version" (the reports quoted above).
func (a *API) namespaceOnClassicRoute(spec router.TopicSpec) bool {
	return spec.Kind == router.KindNamespace && !a.cfg.AnyAPIVersion
}

// CodeNamespaceTopic is the detail code of the 400 answer to a classic publish to a namespace
// topic, so a client (egrid publish) can tell it from other refusals and post the events to
// :publish instead. Azure's answer, "Unknown api version", has no such detail.
const CodeNamespaceTopic = "NamespaceTopic"

// writeNamespaceOnClassicRoute answers a classic publish to the namespace topic name.
func writeNamespaceOnClassicRoute(w http.ResponseWriter, name string) {
	detail := errorDetail{Code: CodeNamespaceTopic, Message: fmt.Sprintf("post to POST /topics/%s:publish?api-version=%s", name, namespaceAPIVersions[1])}
	writeError(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("topic %q is a namespace topic, which takes no classic publish (POST /topics/%s/api/events?api-version=%s; Azure answers it %q) and nothing was accepted: post CloudEvents to POST /topics/%s:publish?api-version=%s (or %s), as the namespace SDKs' sender clients do (a server run with --any-api-version takes the classic route too)", name, name, classicAPIVersions[0], unknownAPIVersion, name, namespaceAPIVersions[1], namespaceAPIVersions[0]), detail)
}
