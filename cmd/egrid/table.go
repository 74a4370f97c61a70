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

// row adds a row of cells.
func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

// note prints line, indented, under the last row added, outside the columns.
func (t *table) note(line string) {
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
