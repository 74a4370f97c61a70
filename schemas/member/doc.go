// Package member words the problem of a member that a document's type does not take: an
// unknown key of a JSON body (router/httpapi) or of the YAML config file (cmd/egrid), named by
// its path in the document ("properties.retryPolicy.bogus") with the members its parent
// takes, so that both say it the same way. It is pure: it imports only the standard library
// and schemas/clip, and finds nothing itself; each decoder walks its own document.
package member
