package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// The YAML parser's own errors ("yaml: line 5: did not find expected ',' or '}'") are
// rewritten here so that they name the right line and say what to do.

// parserError matches an error of the YAML parser proper (go.yaml.in/yaml/v3's parserc.go),
// as opposed to its scanner: the parser reports its 0-based line (the line where the mapping,
// list or node it was reading starts, or else the line of the problem), and none at all for
// the first line, where the scanner's errors carry the 1-based line.
var parserError = regexp.MustCompile(`^yaml: (?:line (\d+): )?(did not find expected (?:<document start>|node content|'-' indicator|key|',' or ']'|',' or '}')|found undefined tag handle|found duplicate %YAML directive|found incompatible YAML document|found duplicate %TAG directive)$`)

// syntaxHints say what to do about a parser error.
var syntaxHints = map[string]string{
	"did not find expected ',' or '}'":    "inside {…} a plain value ends at ',', '?', '[', ']', '{' or '}': quote a value that holds one, e.g. {dsn: \"postgres://host/db?sslmode=disable\"}",
	"did not find expected ',' or ']'":    "inside […] a plain value ends at ',', '?', '[', ']', '{' or '}': quote a value that holds one, e.g. [\"a,b\"]",
	"did not find expected key":           "check the indentation: the keys of one mapping line up, and a list item (-) cannot follow a key's value",
	"did not find expected '-' indicator": "check the indentation: the items (-) of one list line up",
}

// syntaxError returns err, an error of decoding YAML text, naming the 1-based line the YAML
// parser meant and, where it can, what to do.
func syntaxError(err error) error {
	m := parserError.FindStringSubmatch(err.Error())
	if m == nil {
		return err // the scanner's errors and the decoder's name their lines right
	}
	line := 1
	if m[1] != "" {
		n, _ := strconv.Atoi(m[1])
		line = n + 1
	}
	msg := fmt.Sprintf("yaml: line %d: %s", line, m[2])
	if hint, ok := syntaxHints[m[2]]; ok {
		msg += ": " + hint
	}
	return errors.New(msg)
}
