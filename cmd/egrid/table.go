package main

import (
	"bytes"
	"io"
	"strings"
	"text/tabwriter"
)

// table collects the rows of a CLI listing and prints them in columns aligned by
// text/tabwriter, so a long name widens its column instead of pushing the rest of its row out
// of line.
type table struct {
	rows  [][]string
	after map[int]string // a line printed under row i, outside the columns
}

func newTable(header ...string) *table { return &table{rows: [][]string{header}} }

// row adds a row of cells, each made safe for a terminal with [termSafe] (which also
// escapes the tabs and newlines that would break the columns).
func (t *table) row(cells ...string) {
	safe := make([]string, len(cells))
	for i, c := range cells {
		safe[i] = termSafe(c)
	}
	t.rows = append(t.rows, safe)
}

// note prints line, indented, under the last row added, outside the columns, made safe for
// a terminal with [termSafe].
func (t *table) note(line string) {
	line = termSafe(line)
	if t.after == nil {
		t.after = map[int]string{}
	}
	t.after[len(t.rows)-1] = line
}

// write prints the table to w: columns two spaces apart, the last one unpadded.
func (t *table) write(w io.Writer) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	for _, r := range t.rows {
		io.WriteString(tw, strings.Join(r, "\t")+"\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var out strings.Builder
	for i, line := range strings.SplitAfter(buf.String(), "\n") {
		out.WriteString(line)
		if note, ok := t.after[i]; ok {
			out.WriteString("  " + note + "\n")
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}
