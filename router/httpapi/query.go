package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/egridio/egrid/schemas/clip"
)

// Query parameters are read through this file only, so every route reads them the same way:
//
//   - strictQuery parses the whole query once; a pair that does not parse (a broken
//     percent-escape such as maxEvents=%zz, or a semicolon separator) makes the request a 400.
//     req.URL.Query() would drop that pair without a word, so the route would run with its
//     default where the client meant a value: a malformed URL is refused wherever the pair is,
//     even in a parameter the route does not read.
//   - onceQuery reads one parameter a route uses and refuses it given twice.
//   - queryInt reads a number: plain decimal digits only.
//
// Names are case-sensitive (maxEvents, not maxevents), as Event Grid's own are and as Go and
// Azure clients send them; a name in another case is a parameter the route does not read.

// strictQuery parses req's query, or returns an error naming the first pair that does not
// parse (clipped and quoted, so huge or non-UTF-8 input is never echoed raw) and what to do.
func strictQuery(req *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err == nil {
		return q, nil
	}
	rest := req.URL.RawQuery
	for rest != "" {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		if _, perr := url.ParseQuery(pair); perr != nil {
			return nil, fmt.Errorf("the query parameter %q does not parse (%v): percent-encode the URL's query (a %% is %%25, a ; is %%3B) and send it again", clip.String(pair), perr)
		}
	}
	// Not reached: ParseQuery fails only on a pair that fails on its own.
	return nil, fmt.Errorf("the query string does not parse (%v): percent-encode the URL's query and send it again", err)
}

// onceQuery returns the value of the query parameter name, "" when it is absent, or an error
// when it is given more than once. url.Values.Get would take the first and drop the others
// without a word, so "maxEvents=1&maxEvents=100" received one event where the client may have
// meant a hundred; a repeat is refused whatever its values, as a member sent twice in a JSON
// body is (checkStrictJSON). api-version is not read with it: it may repeat, each value one
// its route takes (checkAPIVersion).
func onceQuery(q url.Values, name string) (string, error) {
	vs := q[name]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", fmt.Errorf("the query parameter %q is given %d times: give it once", name, len(vs))
}

// errNotDigits is queryInt's error for a value that is not plain decimal digits.
var errNotDigits = errors.New("not plain decimal digits")

// queryInt reads a query parameter's number: plain decimal digits (leading zeros allowed),
// nothing else. strconv.Atoi alone also took a sign ("+5", "-0"), which no client means in a
// count or a number of seconds; callers check the range and say what to send.
func queryInt(v string) (int, error) {
	if v == "" {
		return 0, errNotDigits
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, errNotDigits
		}
	}
	return strconv.Atoi(v) // an overflow is an error too
}
