package member

import (
	"fmt"
	"strings"

	"github.com/egridio/egrid/schemas/clip"
)

// Unknown is a member of a document that the type it is decoded into has no field for.
type Unknown struct {
	// Path is the member's path in the document ("properties.retryPolicy.bogus"), Parent the
	// path of the object or mapping holding it ("" for the document itself).
	Path, Parent string
	// Known are the names of the members Parent takes, in the order the type declares them.
	Known []string
	// Document names the document itself, for a member at its top ("the body", "the config").
	Document string
}

// Problem says what is wrong with the member and what to do:
//
//	"properties.bogus" is not a member of properties: check its spelling (properties takes destination, filter and retryPolicy)
func (u Unknown) Problem() string {
	parent := u.Document
	if u.Parent != "" {
		parent = clip.String(u.Parent)
	}
	return fmt.Sprintf("%s is not a member of %s: check its spelling (%s takes %s)",
		clip.Quote(u.Path), parent, parent, List(u.Known))
}

// List joins names as a message lists them: "a, b and c" ("no members" for none).
func List(names []string) string {
	switch len(names) {
	case 0:
		return "no members"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
