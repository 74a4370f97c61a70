package egrid_test

import (
	"go/ast"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// internalDocs are the project's own design documents: a user cannot look them up, so no
// message they may read — an error, a log line, a usage text — refers to them. Doc comments
// may (STYLE.md asks them to).
var internalDocs = []string{"SPEC §", "SPEC.md", "DESIGN.md", "DESIGN §", "eventgrid-behaviour.md", "STYLE.md"}

// TestMessagesDoNotCiteInternalDocuments checks every string literal of the non-test code.
func TestMessagesDoNotCiteInternalDocuments(t *testing.T) {
	fset := token.NewFileSet()
	code, _ := repoFiles(t, fset)
	n := 0
	for _, files := range code {
		for _, f := range files {
			ast.Inspect(f, func(node ast.Node) bool {
				lit, ok := node.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				n++
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					s = lit.Value
				}
				for _, d := range internalDocs {
					if strings.Contains(s, d) {
						t.Errorf("%s: a string cites %q, which users cannot look up: say what the rule is instead", fset.Position(lit.Pos()), d)
					}
				}
				return true
			})
		}
	}
	if n < 1000 {
		t.Fatalf("found only %d string literals; is the walk working?", n)
	}
}
