package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"

	"github.com/egridio/egrid/router/secretfile"
	"github.com/egridio/egrid/schemas/clip"
)

// Secrets stay out of `ps` and shell history: every secret serve takes can come from a file
// or the environment instead of a flag.
//
//   - The admin token and the MinIO secret key have a -file flag, an EGRID_*_FILE variable and
//     a *File config key beside their value forms. A file holds the secret alone; trailing
//     line ends are dropped. At one level (flags, environment or config file) give the value
//     or the file, not both; across levels flag > environment > file, as for every setting.
//   - Any string value of the YAML config — topic keys, passwords in broker URLs, the admin
//     token — may reference an environment variable as ${NAME} or a file as ${file:PATH}
//     (PATH relative to the working directory; trailing line ends dropped). A reference to an
//     unset or empty variable or to an unreadable or empty file is an error; $${ is a
//     literal ${. References expand to strings: numbers, booleans and durations have their
//     EGRID_* variables.
//
// Every secret file is read by readSecretFile (secretfile.Read): a regular file of at most
// 64 KiB, its mode taken from the open file it is read from. serve warns of each one group or
// others may read (warnReadableSecrets).

// secretFileFlags are serve's -file flags of its secrets.
func secretFileFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "admin-token-file", Usage: "file holding the admin API's bearer token, instead of --admin-token (env EGRID_ADMIN_TOKEN_FILE)"},
		&cli.StringFlag{Name: "minio-secret-key-file", Usage: "file holding the MinIO secret key, instead of --minio-secret-key (env EGRID_MINIO_SECRET_KEY_FILE)"},
	}
}

// secretSource names where one secret may come from, at each level.
type secretSource struct {
	flag, fileFlag    string // --admin-token, --admin-token-file
	env, fileEnv      string // EGRID_ADMIN_TOKEN, EGRID_ADMIN_TOKEN_FILE
	key, fileKey      string // server.adminToken, server.adminTokenFile (for messages)
	fileVal, filePath string // their values in the config file
}

// resolveSecret returns a secret by flag > environment > config file, each level giving the
// value itself or a file that holds it (not both), and the file it was read from (zero when
// given as a value). "" when none is set.
func resolveSecret(c *cli.Context, getenv func(string) string, s secretSource) (string, secretFile, error) {
	level := func(val, path, valName, pathName string) (string, secretFile, bool, error) {
		switch {
		case val != "" && path != "":
			return "", secretFile{}, true, fmt.Errorf("%s and %s are both set: give the secret or the file that holds it, not both", valName, pathName)
		case path != "":
			v, f, err := readSecretFile(path)
			if err != nil {
				return "", secretFile{}, true, fmt.Errorf("%s: %w", pathName, err)
			}
			return v, f, true, nil
		}
		return val, secretFile{}, val != "", nil
	}
	flagVal, flagPath := "", ""
	if c.IsSet(s.flag) {
		flagVal = c.String(s.flag)
	}
	if c.IsSet(s.fileFlag) {
		flagPath = c.String(s.fileFlag)
	}
	for _, l := range []struct{ val, path, valName, pathName string }{
		{flagVal, flagPath, "--" + s.flag, "--" + s.fileFlag},
		{getenv(s.env), getenv(s.fileEnv), s.env, s.fileEnv},
		{s.fileVal, s.filePath, s.key, s.fileKey},
	} {
		if v, f, ok, err := level(l.val, l.path, l.valName, l.pathName); ok || err != nil {
			return v, f, err
		}
	}
	return "", secretFile{}, nil
}

// secretFile is a file a secret was read from: its path and its mode, from the open file the
// secret was read from.
type secretFile struct {
	path string
	mode fs.FileMode
}

// warnReadableSecrets logs a warning, with the remedy, for each of files (zero ones skipped)
// that group or others may read, write or enter (secretfile.Exposed): the admin token file,
// the MinIO secret key file, the TLS private key and the files of ${file:PATH} references.
// ssh refuses such a private key and PostgreSQL such a TLS key; serve warns and goes on,
// because the usual ways of handing secrets to a container give them wider modes (Kubernetes
// mounts secrets 0644 unless defaultMode says otherwise). The store's --secret-key-file is
// refused instead (disk.ReadSecretKey): it is read at every start, and a key anyone can read
// seals nothing.
func warnReadableSecrets(log *slog.Logger, files ...secretFile) {
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		if f.path == "" || seen[f.path] || !secretfile.Exposed(f.mode) {
			continue
		}
		seen[f.path] = true
		log.Warn(fmt.Sprintf("the secret file %s can be read by group or others: run chmod 600 %s (with Kubernetes, defaultMode: 0400 on the secret volume)", f.path, f.path),
			"mode", fmt.Sprintf("%04o", f.mode.Perm()))
	}
}

// readSecretFile reads a secret from path (secretfile.Read: a regular file of at most 64 KiB),
// trailing line ends dropped, and returns it with the file it was read from.
func readSecretFile(path string) (string, secretFile, error) {
	raw, mode, err := secretfile.Read(path)
	if err != nil {
		if errors.Is(err, secretfile.ErrNotRegular) || errors.Is(err, secretfile.ErrTooLarge) {
			return "", secretFile{}, err // the error names the file and what to do
		}
		return "", secretFile{}, fmt.Errorf("reading the secret: %w", err)
	}
	v := strings.TrimRight(string(raw), "\r\n")
	if v == "" {
		return "", secretFile{}, fmt.Errorf("the secret file %s is empty", path)
	}
	return v, secretFile{path: path, mode: mode}, nil
}

// decodeConfig strictly decodes a YAML config (unknown keys are errors) and expands the
// ${NAME} and ${file:PATH} references in its string values, noting the files read in
// cfg.secretFiles. Strictness is checked on the text as written, so errors name the lines of
// the file. The file is one YAML document (oneDocument).
func decodeConfig(raw []byte, getenv func(string) string) (*fileConfig, error) {
	var cfg fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return &cfg, nil
		}
		var doc yaml.Node
		if yaml.Unmarshal(raw, &doc) == nil {
			return nil, configError(err, &doc)
		}
		return nil, syntaxError(err)
	}
	if err := oneDocument(dec); err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, syntaxError(err)
	}
	x := expansion{getenv: getenv}
	if !x.node(&doc) {
		return &cfg, nil // nothing to expand: cfg is the file as written
	}
	if err := errors.Join(x.errs...); err != nil {
		return nil, err
	}
	cfg = fileConfig{}
	if err := doc.Decode(&cfg); err != nil {
		return nil, configError(err, &doc)
	}
	cfg.secretFiles = x.files
	return &cfg, nil
}

// oneDocument reads the rest of a config's YAML stream, which must hold no other document: a
// second document (after ---) would be read by nothing, so its settings and topics would be
// silently left out. Empty documents (a trailing ---) hold nothing to leave out.
func oneDocument(dec *yaml.Decoder) error {
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return syntaxError(err)
		case len(next.Content) == 1 && next.Content[0].Tag == "!!null" && next.Content[0].Value == "":
			continue // empty
		}
		return fmt.Errorf("line %d: a second YAML document starts here: a config file is one document, and nothing would read the second: remove the --- to merge them, or keep each in a file of its own", next.Line)
	}
}

// expansion expands the references of one config: its errors and the secret files it read.
type expansion struct {
	getenv func(string) string
	errs   []error
	files  []secretFile
}

// node expands the references in the scalar values under n (not in mapping keys), reporting
// whether any was found.
func (x *expansion) node(n *yaml.Node) bool {
	found := false
	switch n.Kind {
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "${") {
			return false
		}
		v, err := x.refs(n.Value)
		if err != nil {
			x.errs = append(x.errs, fmt.Errorf("line %d: %w", n.Line, err))
		}
		n.Value, n.Tag = v, "!!str"
		return true
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			found = x.node(n.Content[i]) || found
		}
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			found = x.node(c) || found
		}
	}
	return found
}

// refs replaces ${NAME} by the environment variable NAME, ${file:PATH} by the secret in the
// file PATH, and $${ by ${.
func (x *expansion) refs(s string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1] + "${")
			s = s[i+2:]
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("%q has a ${ without its closing }: write ${NAME} or ${file:PATH}, or $${ for a literal ${", clip.String(s))
		}
		ref := s[i+2 : i+end]
		b.WriteString(s[:i])
		s = s[i+end+1:]
		if path, ok := strings.CutPrefix(ref, "file:"); ok {
			v, f, err := readSecretFile(path)
			if err != nil {
				return "", fmt.Errorf("${file:%s}: %w", path, err)
			}
			x.files = append(x.files, f)
			b.WriteString(v)
			continue
		}
		if ref == "" || strings.ContainsAny(ref, " :$") {
			return "", fmt.Errorf("${%s} is not a reference: write ${NAME} for an environment variable or ${file:PATH} for a file", ref)
		}
		v := x.getenv(ref)
		if v == "" {
			return "", fmt.Errorf("${%s}: the environment variable %s is not set (or empty): export it, or write the value itself", ref, ref)
		}
		b.WriteString(v)
	}
}
