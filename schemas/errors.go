package schemas

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/egridio/egrid/schemas/clip"
)

// Limits bounds one publish request (SPEC §8). A zero field means "no limit".
type Limits struct {
	// MaxEventBytes bounds one event, counted as the bytes it takes in the request body (for
	// binary-mode CloudEvents: the data plus the ce-* attribute values).
	MaxEventBytes int
	// MaxRequestBytes bounds the request body.
	MaxRequestBytes int
	// MaxEvents bounds the number of events in one request.
	MaxEvents int
}

// ClassicLimits are the limits of a classic topic: 1 MB per event and per request, 5000
// events per request (SPEC §8).
var ClassicLimits = Limits{MaxEventBytes: 1 << 20, MaxRequestBytes: 1 << 20, MaxEvents: 5000}

// NamespaceLimits are the limits of a namespace topic: 1 MB per event and per request, 1000
// events per request (SPEC §8).
var NamespaceLimits = Limits{MaxEventBytes: 1 << 20, MaxRequestBytes: 1 << 20, MaxEvents: 1000}

// maxReported bounds how many *ValidationError one decode lists, so a request of 5000 bad
// events gets a readable answer; [ProblemsError] counts the rest.
const maxReported = 20

// ValidationError is a problem with one event (Index >= 0, counted from 0 in the request) or
// with the whole request (Index == -1). Field names the offending JSON member or attribute,
// or is empty when the problem is not about one field. An HTTP front end answers 400 with it.
//
// When a decode finds several problems it returns a *[ProblemsError] holding the first ones
// and counting them all; use [ValidationErrors] to list them.
type ValidationError struct {
	Index  int    // the event's index in the request, or -1 for the whole request
	Field  string // the member or attribute at fault, shortened by [clip.String] (its first 128 bytes and "..." when longer), or ""
	Reason string // what is wrong and what to do, after the field name
}

// Error reads like `event 3: field "id": is required` or `request: body is not valid JSON:
// ...`.
func (e *ValidationError) Error() string {
	b := make([]byte, 0, 32+len(e.Field)+len(e.Reason))
	if e.Index < 0 {
		b = append(b, "request: "...)
	} else {
		b = append(b, "event "...)
		b = strconv.AppendInt(b, int64(e.Index), 10)
		b = append(b, ": "...)
	}
	if e.Field != "" {
		b = append(b, "field "...)
		b = strconv.AppendQuote(b, e.Field)
		b = append(b, ": "...)
	}
	b = append(b, e.Reason...)
	return string(b)
}

// ValidationErrors returns every [*ValidationError] in err's tree (err itself, or the errors
// joined in it), in order, so an HTTP front end can list each problem as an error detail.
func ValidationErrors(err error) []*ValidationError {
	var out []*ValidationError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *ValidationError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// ProblemsError is the error of a decode that found more than one problem: the first
// maxReported (20) of them, in order, and how many there are in all, so a request of 5000 bad
// events is answered in kilobytes and still tells how many are bad.
type ProblemsError struct {
	Problems []error // the first problems, each a *ValidationError
	Total    int     // every problem found, those in Problems included
	Events   int     // how many events have a problem (problems of the whole request not counted)
}

// Error lists the problems one a line, as [errors.Join] does, and counts those not listed.
func (e *ProblemsError) Error() string {
	msg := errors.Join(e.Problems...).Error()
	if more := e.Total - len(e.Problems); more > 0 {
		msg += fmt.Sprintf("\nand %d more problems, not listed", more)
	}
	return msg
}

// Unwrap returns the problems listed, for [errors.As] and [ValidationErrors].
func (e *ProblemsError) Unwrap() []error { return e.Problems }

// TooLargeError reports a request (Index == -1) or one event (Index >= 0) over its byte
// limit. An HTTP front end answers 413 Payload Too Large with it (SPEC §1.1).
type TooLargeError struct {
	Index int // the event's index, or -1 for the whole request
	Size  int // its size in bytes
	Limit int // the limit it is over
}

// Error says which limit was exceeded and what to do.
func (e *TooLargeError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("request: body is %d bytes, over the limit of %d bytes per request: split the events into smaller requests", e.Size, e.Limit)
	}
	return fmt.Sprintf("event %d: %d bytes, over the limit of %d bytes per event: make the event smaller, for example by sending a reference to large data", e.Index, e.Size, e.Limit)
}

// TooManyEventsError reports more events in one request than [Limits.MaxEvents]. An HTTP front
// end answers 400 with it.
type TooManyEventsError struct {
	Count int // events in the request
	Limit int // events allowed per request
}

// Error says how many events were sent and that the request must be split.
func (e *TooManyEventsError) Error() string {
	return fmt.Sprintf("request: %d events, over the limit of %d events per request: split the events into several requests", e.Count, e.Limit)
}

// problems collects the validation errors of one decode, up to maxReported, and counts them
// all.
type problems struct {
	errs   []error
	total  int // problems added
	events int // events with a problem
	last   int // 1 + the index of the last event counted in events
}

func (p *problems) full() bool { return len(p.errs) >= maxReported }

// add records a problem of event index (-1: the whole request). The events of a decode come
// in order, so an event's problems follow each other.
func (p *problems) add(index int, field, reason string) {
	if p.count(index) {
		p.errs = append(p.errs, &ValidationError{Index: index, Field: clip.String(field), Reason: reason}) // a member name is whatever the publisher sent
	}
}

// count counts a problem of event index and reports whether it is among those listed.
func (p *problems) count(index int) (listed bool) {
	p.total++
	if index >= 0 && index+1 != p.last {
		p.events++
		p.last = index + 1
	}
	return !p.full()
}

// Problems returns the problems found outside a decoder (a front end's own checks of a
// request, such as a ce-* header sent twice) as a decode returns its own: nil for none, the
// one problem, or a *[ProblemsError] holding the first 20, in the order given, and counting
// them all, so an answer stays kilobytes however many there are. Their events must come in
// order, as a decode's do. Each Field is taken as it is (shortened by [clip.String] already).
func Problems(errs []*ValidationError) error {
	var p problems
	for _, e := range errs {
		if p.count(e.Index) {
			p.errs = append(p.errs, e)
		}
	}
	return p.err()
}

// has reports whether a problem of event index with field is held already (one that binary
// mode found in a ce-* header, say), so a value is not refused twice.
func (p *problems) has(index int, field string) bool {
	for _, e := range p.errs {
		if ve, ok := e.(*ValidationError); ok && ve.Index == index && ve.Field == field {
			return true
		}
	}
	return false
}

// err returns nil, the single error, or a *ProblemsError.
func (p *problems) err() error {
	switch p.total {
	case 0:
		return nil
	case 1:
		return p.errs[0]
	}
	return &ProblemsError{Problems: p.errs, Total: p.total, Events: p.events}
}

// requestError is a ValidationError about the whole request.
func requestError(reason string) error {
	return &ValidationError{Index: -1, Reason: reason}
}

// syntaxProblem turns a scanner error into the request-level ValidationError a client sees.
func syntaxProblem(err error) error {
	return requestError("body is not valid JSON: " + err.Error())
}

// checkRequestSize refuses a body over lim.MaxRequestBytes.
func checkRequestSize(n int, lim Limits) error {
	if lim.MaxRequestBytes > 0 && n > lim.MaxRequestBytes {
		return &TooLargeError{Index: -1, Size: n, Limit: lim.MaxRequestBytes}
	}
	return nil
}

// checkEventSize refuses an event over lim.MaxEventBytes.
func checkEventSize(index, n int, lim Limits) error {
	if lim.MaxEventBytes > 0 && n > lim.MaxEventBytes {
		return &TooLargeError{Index: index, Size: n, Limit: lim.MaxEventBytes}
	}
	return nil
}
