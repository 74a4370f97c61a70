package httpapi

import (
	"fmt"
	"net/url"
)

// onceQuery returns the value of the query parameter name, "" when it is absent, or an error
// when it is given more than once. url.Values.Get would take the first and drop the others
// without a word, so "maxEvents=1&maxEvents=100" received one event where the client may have
// meant a hundred; a repeat is refused whatever its values, as a member sent twice in a JSON
// body is (checkStrictJSON). Parameters a route does not read (api-version on the pull
// routes) are not checked.
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
