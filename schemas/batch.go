package schemas

import "errors"

// This file holds what every array-of-events decoder shares: the top-level array, the
// per-event and per-request limits and the conversion of scanner errors.

// openArray positions s at the '[' of a top-level array of events, or explains why the body is
// not one. what names the publish in messages ("an Event Grid schema publish") and want the
// bodies it accepts ("a JSON array of events").
func openArray(s *scanner, what, want string) error {
	s.skipWS()
	if s.pos >= len(s.buf) {
		return requestError("body is empty: " + what + " is " + want)
	}
	c := s.buf[s.pos]
	if c == '[' {
		return nil
	}
	if c == '{' {
		return requestError("body is a JSON object, but " + what + " must be a JSON array of events: wrap a single event in [ ]")
	}
	k := kindOf(c)
	if k == kindNone {
		return syntaxProblem(s.expected("'['"))
	}
	if _, err := s.skipValue(0); err != nil {
		return syntaxProblem(err)
	}
	if err := s.end(); err != nil {
		return syntaxProblem(err)
	}
	return requestError("body is a JSON " + k.String() + ", but " + what + " must be " + want)
}

// scanPublish walks the publish body s is positioned at: a JSON array of events or, with
// single, also one event object ([scanOne]). schema names the body in errors ("an Event Grid
// schema") and events what its array holds ("events").
func scanPublish(s *scanner, lim Limits, p *problems, single bool, schema, events string, fn func(i int) error) error {
	if single && s.peek() == '{' {
		return scanOne(s, lim, fn)
	}
	what, want := schema+" publish", "a JSON array of "+events
	if single {
		what, want = schema+" message", "an event object or a JSON array of "+events
	}
	if err := openArray(s, what, want); err != nil {
		return err
	}
	return scanEvents(s, lim, p, fn)
}

// scanOne decodes the single event object s is positioned at, as event 0: fn is called with
// index 0 and must consume the object and return only scanner errors. Nothing but white space
// may follow the object, and the object is checked against lim.MaxEventBytes as published, so
// a body holding one event is measured as that event and not as a batch around it. The result
// is a *TooLargeError, a request-level *ValidationError for malformed JSON, or nil (p may
// still hold problems).
func scanOne(s *scanner, lim Limits, fn func(i int) error) error {
	start := s.pos
	if err := fn(0); err != nil {
		return asSyntaxProblem(err)
	}
	if err := s.end(); err != nil {
		return syntaxProblem(err)
	}
	return checkEventSize(0, s.pos-start, lim)
}

// scanEvents walks the array s is positioned at. For each element that is an object it calls
// fn with the element's index, with s at its '{'; fn must consume the object and return only
// scanner errors. Elements of other kinds are reported to p. Each element is checked against
// lim.MaxEventBytes after fn returns; events past lim.MaxEvents are only counted. The result
// is a *TooLargeError, a *TooManyEventsError, a request-level *ValidationError for malformed
// JSON, or nil (p may still hold problems).
func scanEvents(s *scanner, lim Limits, p *problems, fn func(i int) error) error {
	empty, _ := s.arrayStart()
	if empty {
		if err := s.end(); err != nil {
			return syntaxProblem(err)
		}
		return requestError("body is an empty JSON array: send at least one event")
	}
	n := 0
	for ; ; n++ {
		start := s.pos
		switch {
		case lim.MaxEvents > 0 && n >= lim.MaxEvents:
			if _, err := s.skipValue(1); err != nil {
				return syntaxProblem(err)
			}
		case s.peek() == '{':
			if err := fn(n); err != nil {
				return asSyntaxProblem(err)
			}
		default:
			k, err := s.skipValue(1)
			if err != nil {
				return syntaxProblem(err)
			}
			p.add(n, "", "must be a JSON object, got "+k.String())
		}
		if err := checkEventSize(n, s.pos-start, lim); err != nil {
			return err
		}
		more, err := s.arrayNext()
		if err != nil {
			return syntaxProblem(err)
		}
		if !more {
			break
		}
	}
	if err := s.end(); err != nil {
		return syntaxProblem(err)
	}
	if lim.MaxEvents > 0 && n+1 > lim.MaxEvents {
		return &TooManyEventsError{Count: n + 1, Limit: lim.MaxEvents}
	}
	return nil
}

// asSyntaxProblem converts a scanner error and passes any other error through.
func asSyntaxProblem(err error) error {
	var se *syntaxError
	if errors.As(err, &se) {
		return syntaxProblem(se)
	}
	return err
}
