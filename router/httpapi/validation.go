package httpapi

import (
	"errors"
	"net/http"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/logattr"
)

// validationPath is the route of validationUrl, shaped like Event Grid's
// (https://<host>/eventsubscriptions/<name>/validate?id=<code>&t=<time>&apiVersion=...&token=...).
const validationPath = "/eventsubscriptions/{name}/validate"

// handleValidationURL serves the validationUrl of a manual validation (SPEC §2.5): GET
// /eventsubscriptions/{name}/validate?id=...&token=.... It needs no admin token — the random
// token in the URL is the credential — and answers 404 for an unknown, used or expired URL.
func (a *API) handleValidationURL(w http.ResponseWriter, req *http.Request) {
	q, err := strictQuery(req)
	var token string
	if err == nil {
		token, err = onceQuery(q, "token")
	}
	if err != nil {
		// A token given twice is refused rather than one of them tried: the URL was not the
		// one the subscription's creation handed out.
		writeError(w, http.StatusBadRequest, "BadRequest", err.Error()+"; fetch the validationUrl exactly as the validation event gave it")
		return
	}
	err = a.r.CompleteValidation(req.Context(), req.PathValue("name"), token)
	switch {
	case errors.Is(err, router.ErrValidationURLUnknown):
		writeError(w, http.StatusNotFound, "NotFound", "this validation URL is unknown, was used already or has expired: create or update the event subscription again to get a new one")
		return
	case errors.Is(err, router.ErrStoreDamaged):
		// The subscription's stored record is damaged: fetching again does not help; the
		// operator has to delete and create it again (the log says so).
		a.log.Error("completing a manual validation failed: the event subscription's stored record is damaged", logattr.Subscription, req.PathValue("name"), "err", err)
		writeError(w, http.StatusInternalServerError, "InternalServerError", "completing the validation failed: the event subscription's stored data is damaged, and fetching this URL again does not help; the operator of the event router has to create the event subscription again (the server log says what is damaged)")
		return
	case err != nil:
		// The cause can name files on the server: it goes to the log only.
		a.log.Error("completing a manual validation failed", logattr.Subscription, req.PathValue("name"), "err", err)
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "completing the validation failed: fetch this validation URL again later")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("Webhook successfully validated as a subscription endpoint.\n"))
}
