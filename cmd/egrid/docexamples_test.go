package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// yamlBlock is a YAML example of README.md: a ```yaml fence and what it holds.
var yamlBlock = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")

// exampleKey is a topic key as egrid generates them, for the examples' ${...} references.
const exampleKey = "c2VjcmV0LWV4YW1wbGUta2V5LWZvci10aGUtZG9jcy0xMjM0NQ=="

// TestREADMEConfigExamplesAreValid runs `egrid validate` on every YAML example of README.md,
// with the variables and /run/secrets files its references name: the Brokers example's
// postgres DSN, unquoted, held a '?' that ends a plain value inside {…}, and the file did not
// parse.
func TestREADMEConfigExamplesAreValid(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := yamlBlock.FindAllSubmatchIndex(b, -1)
	if len(blocks) < 5 {
		t.Fatalf("found %d YAML examples in README.md; is the fence still ```yaml?", len(blocks))
	}
	for _, m := range blocks {
		line := bytes.Count(b[:m[0]], []byte("\n")) + 1
		example := string(b[m[2]:m[3]])
		dir := t.TempDir()
		// Secret files the example names under /run/secrets are made in dir.
		for _, ref := range regexp.MustCompile(`/run/secrets/[\w.-]+`).FindAllString(example, -1) {
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(ref)), []byte(exampleKey+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		example = strings.ReplaceAll(example, "/run/secrets/", dir+"/")
		path := filepath.Join(dir, "egrid.yaml")
		if err := os.WriteFile(path, []byte(example), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		code := run(context.Background(), []string{"egrid", "validate", "--config", path},
			env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return exampleKey }})
		if code != 0 || !strings.Contains(out.String(), "is valid") {
			t.Errorf("README.md line %d: egrid validate of its YAML example: exit %d\n%s\n%s", line, code, out.String(), example)
		}
	}
}

// TestConfigCommentExampleDecodes decodes the example of fileConfig's doc comment strictly:
// its values are placeholders ("..."), but its keys and syntax are the config file's.
func TestConfigCommentExampleDecodes(t *testing.T) {
	src, err := os.ReadFile("config.go")
	if err != nil {
		t.Fatal(err)
	}
	_, comment, ok := strings.Cut(string(src), "// fileConfig is the YAML config")
	comment, _, ok2 := strings.Cut(comment, "type fileConfig struct")
	if !ok || !ok2 {
		t.Fatal("fileConfig's doc comment not found in config.go")
	}
	var example strings.Builder
	for l := range strings.Lines(comment) {
		if y, ok := strings.CutPrefix(l, "//\t"); ok {
			example.WriteString(y)
		}
	}
	if !strings.Contains(example.String(), "postgres:") {
		t.Fatalf("fileConfig's doc comment has no example:\n%s", example.String())
	}
	if _, err := decodeConfig([]byte(example.String()), func(string) string { return exampleKey }); err != nil {
		t.Errorf("fileConfig's doc comment example: %v\n%s", err, example.String())
	}
}

// TestConfigSyntaxErrorsNameTheirLine: the YAML parser names the line before the one it
// means (and none for the first); the config's errors name the line itself and what to do.
func TestConfigSyntaxErrorsNameTheirLine(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"a ? inside {} on line 3", "server:\n  brokers:\n    postgres: {dsn: postgres://h/db?sslmode=disable}\n",
			[]string{"line 3: did not find expected ',' or '}'", "quote a value"}},
		{"a ? inside {} on line 1", "server: {publicUrl: http://h/?x}\n",
			[]string{"line 1: did not find expected ',' or '}'"}},
		{"an unclosed [ on line 2", "server:\n  egress: {allow: [10.0.0.0/8}\n",
			[]string{"line 2: "}},
		{"a key out of line on line 3", "server:\n  listen: x\n dataDir: y\n",
			[]string{"line 3: did not find expected key", "check the indentation"}},
		{"a scanner error keeps its line", "server:\n  listen: 'x\n",
			[]string{"line 2: found unexpected end of stream"}},
	} {
		_, err := decodeConfig([]byte(c.yaml), func(string) string { return "" })
		if err == nil {
			t.Errorf("%s: decoded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant %q", c.name, err, w)
			}
		}
	}
}
