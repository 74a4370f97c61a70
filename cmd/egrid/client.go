package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/schemas/clip"
)

// client talks to a running egrid server.
type client struct {
	server, token string
	http          *http.Client
}

func serverFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "server", Usage: "egrid server URL (env EGRID_SERVER)", Value: "http://" + defaultListen},
		&cli.StringFlag{Name: "admin-token", Usage: "admin bearer token (env EGRID_ADMIN_TOKEN)"},
	}
}

func newClient(c *cli.Context, e env) *client {
	server := c.String("server")
	if !c.IsSet("server") && e.Getenv("EGRID_SERVER") != "" {
		server = e.Getenv("EGRID_SERVER")
	}
	token := c.String("admin-token")
	if token == "" {
		token = e.Getenv("EGRID_ADMIN_TOKEN")
	}
	// Creating a webhook subscription may wait for its validation handshake: two tries of up
	// to 30 s each, 5 s apart (router.ValidationRetryDelay).
	return &client{server: strings.TrimRight(server, "/"), token: token, http: apiClient(2 * time.Minute)}
}

// apiClient is the HTTP client of every CLI call to an egrid server, timeout 0 meaning none.
// It follows no redirect (the 3xx answer comes back, and serverError says what it was):
// egrid's API never redirects, and net/http would send a request's custom headers on to the
// redirect's target, another host's included, so an aeg-sas-key (unlike the admin token's
// Authorization header, which net/http drops there) and the body would go to whoever answered
// a 3xx: a misconfigured ingress, or anyone on the path of an http:// --server.
func apiClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// do sends a request and decodes a JSON answer into out (when non-nil). Error answers become an
// error carrying the server's message.
func (cl *client) do(method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, cl.server+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if cl.token != "" {
		req.Header.Set("Authorization", "Bearer "+cl.token)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return fmt.Errorf("calling %s: %w (is `egrid serve` running? use --server)", cl.server, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode >= 300 {
		return serverError(resp, raw)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			// A server that is not egrid's (a web server, a proxy's login page) answers
			// 200 with HTML: say so, not only what the JSON decoder stumbled on.
			p, _, _ := strings.Cut(path, "?")
			return cli.Exit(fmt.Sprintf("the answer of %s %s from --server %s is not egrid's JSON (%v): check --server (EGRID_SERVER)", method, p, cl.server, err), 1)
		}
	}
	return nil
}

// serverError is the error of an answer that is not a success: the server's own message when
// it sent one, and for a redirect (which apiClient does not follow) where it pointed, without
// the target's query string. The message may hold an endpoint's text (a failed validation
// handshake's status line) or whatever a non-egrid server sent: run prints every error
// through termSafeText.
func serverError(resp *http.Response, raw []byte) error {
	status := resp.StatusCode
	if status >= 300 && status < 400 {
		to := "nowhere (no Location)"
		if loc, err := resp.Location(); err == nil {
			loc.RawQuery, loc.Fragment, loc.User = "", "", nil
			to = loc.String()
		}
		return cli.Exit(fmt.Sprintf("the server answered %d, redirecting to %s, which was not followed: egrid's API does not redirect; check --server (http or https, its host and port, no path)", status, to), 1)
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Details []struct {
				Message string `json:"message"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
		msg := fmt.Sprintf("%d %s: %s", status, e.Error.Code, e.Error.Message)
		if len(e.Error.Details) > 1 {
			for _, d := range e.Error.Details {
				msg += "\n  - " + d.Message
			}
		}
		return cli.Exit(msg, 1)
	}
	return cli.Exit(fmt.Sprintf("%d: %s", status, strings.TrimSpace(string(raw))), 1)
}

// pathSegment is s escaped as one segment of a URL path. Names come from flags as typed: a
// '?', '#' or '/' in one (a typo, or a shell's doing) would otherwise end the path early or
// add segments, and `topic delete --name 'orders?typo'` would delete orders. Escaped, the
// server gets the whole name and refuses it. "." and ".." are escaped too, so the server's
// path cleaning does not take them for directory steps.
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// topicPath is the admin API path of a topic.
func topicPath(topic string) string { return "/admin/topics/" + pathSegment(topic) }

// subscriptionPath is the admin API path of a topic's event subscription.
func subscriptionPath(topic, sub string) string {
	return topicPath(topic) + "/eventSubscriptions/" + pathSegment(sub)
}

// printJSON writes v as indented JSON, what every -o json prints, as UTF-8 a terminal cannot
// obey (termSafeJSON).
func printJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(termSafeJSON(buf.Bytes()))
	return err
}

func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "output format: table or json", Value: "table",
		// Checked before the command runs: a misspelt format (-o jsn) printed a table and
		// exited 0, which a script reading JSON only finds out later; a create or update
		// given one changes nothing.
		Action: func(_ *cli.Context, v string) error {
			if v != "table" && v != "json" {
				return cli.Exit(fmt.Sprintf("--output %q: use table or json", clip.String(v)), 2)
			}
			return nil
		}}
}

func publishCommand(e env) *cli.Command {
	return &cli.Command{
		Name:  "publish",
		Usage: "publish events to a topic",
		Description: `Posts events to /topics/<topic>/api/events with the topic key. --data or --file holds a
JSON array of events (a single JSON object is wrapped in an array). CloudEvents (objects with
"specversion") are sent as application/cloudevents-batch+json, and to a namespace topic, which
takes /topics/<topic>:publish only, there.

Example:
   egrid publish --topic orders --key "$KEY" --data '[{"id":"1","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{}}]'`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", Usage: "egrid server URL (env EGRID_SERVER)", Value: "http://" + defaultListen},
			&cli.StringFlag{Name: "topic", Usage: "topic name", Required: true},
			&cli.StringFlag{Name: "key", Usage: "topic key, sent as aeg-sas-key (env EGRID_TOPIC_KEY); omit against --insecure-dev servers"},
			&cli.StringFlag{Name: "data", Usage: "the events as JSON"},
			&cli.StringFlag{Name: "file", Usage: "file with the events as JSON (- for standard input)"},
		},
		Action: func(c *cli.Context) error {
			body, err := publishBody(c)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			cl := newClient(c, e)
			ct := "application/json"
			ce := bytes.Contains(body, []byte(`"specversion"`))
			if ce {
				ct = "application/cloudevents-batch+json; charset=utf-8"
			}
			key := c.String("key")
			if key == "" {
				key = e.Getenv("EGRID_TOPIC_KEY")
			}
			topic := "/topics/" + pathSegment(c.String("topic"))
			resp, raw, err := postEvents(cl, topic+"/api/events?api-version=2018-01-01", ct, key, body)
			if err != nil {
				return err
			}
			if ce && resp.StatusCode == http.StatusBadRequest && hasDetail(raw, httpapi.CodeNamespaceTopic) {
				// A namespace topic takes :publish only, with its own api-version.
				resp, raw, err = postEvents(cl, topic+":publish?api-version=2024-06-01", ct, key, body)
				if err != nil {
					return err
				}
			}
			if resp.StatusCode != http.StatusOK {
				return serverError(resp, raw)
			}
			fmt.Fprintln(e.Stdout, "published")
			return nil
		},
	}
}

// postEvents posts body to the server's path with the topic key (if any) and returns the
// answer with its body, read whole up to maxPublishAnswer.
func postEvents(cl *client, path, contentType, key string, body []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, cl.server+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", contentType)
	if key != "" {
		req.Header.Set("aeg-sas-key", key)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return nil, nil, cli.Exit(fmt.Sprintf("publishing to %s: %v (is `egrid serve` running? use --server)", cl.server, err), 1)
	}
	defer resp.Body.Close()
	// The answer is empty, or an error of a few kilobytes: read at most maxPublishAnswer, so
	// a server (or whatever --server reaches) that sends without end cannot hold the CLI's
	// memory.
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxPublishAnswer))
	return resp, raw, nil
}

// hasDetail reports whether raw, an error answer in Event Grid's shape, has a detail of code.
func hasDetail(raw []byte, code string) bool {
	var e struct {
		Error struct {
			Details []struct {
				Code string `json:"code"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return false
	}
	for _, d := range e.Error.Details {
		if d.Code == code {
			return true
		}
	}
	return false
}

// maxPublishAnswer bounds how much of a publish's answer the CLI reads.
const maxPublishAnswer = 1 << 20

func publishBody(c *cli.Context) ([]byte, error) {
	var raw []byte
	switch {
	case c.String("data") != "" && c.String("file") != "":
		return nil, fmt.Errorf("use --data or --file, not both")
	case c.String("data") != "":
		raw = []byte(c.String("data"))
	case c.String("file") == "-":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, err
		}
		raw = b
	case c.String("file") != "":
		b, err := os.ReadFile(c.String("file"))
		if err != nil {
			return nil, err
		}
		raw = b
	default:
		return nil, fmt.Errorf("give the events with --data or --file")
	}
	raw = bytes.TrimSpace(raw)
	if !json.Valid(raw) {
		return nil, fmt.Errorf("the events are not valid JSON")
	}
	if len(raw) > 0 && raw[0] == '{' {
		raw = append(append([]byte{'['}, raw...), ']')
	}
	return raw, nil
}

// armTopic is a topic as the admin API returns it: the fields the table shows, decoded, and
// the whole object as the server sent it (id, type, properties.endpoint, provisioningState,
// ...), which -o json prints.
type armTopic struct {
	Name       string           `json:"name"`
	Properties router.TopicSpec `json:"properties"`
	answered   json.RawMessage
}

func (t *armTopic) UnmarshalJSON(b []byte) error {
	type fields armTopic // without the methods
	return keepAnswer(b, (*fields)(t), &t.answered)
}

func (t armTopic) MarshalJSON() ([]byte, error) {
	type fields armTopic
	return answerJSON(t.answered, fields(t))
}

// keepAnswer decodes b, an object the server answered, into v and keeps a copy of it in
// answered, for the UnmarshalJSON of a type whose -o json prints what the server answered,
// fields the CLI does not know included.
func keepAnswer(b []byte, v any, answered *json.RawMessage) error {
	if err := json.Unmarshal(b, v); err != nil {
		return err
	}
	*answered = bytes.Clone(b)
	return nil
}

// answerJSON is the JSON of an object the server answered (kept by keepAnswer), or of its
// fields v when it was not decoded from an answer.
func answerJSON(answered json.RawMessage, v any) ([]byte, error) {
	if answered != nil {
		return answered, nil
	}
	return json.Marshal(v)
}

func topicCommand(e env) *cli.Command {
	nameFlag := &cli.StringFlag{Name: "name", Aliases: []string{"n"}, Usage: "topic name", Required: true}
	return &cli.Command{
		Name:  "topic",
		Usage: "manage topics on a running server",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "create a topic",
				Flags: append(serverFlags(), nameFlag, outputFlag(),
					&cli.StringFlag{Name: "input-schema", Usage: "EventGridSchema, CloudEventSchemaV1_0 or CustomEventSchema", DefaultText: "EventGridSchema; CloudEventSchemaV1_0 for --kind namespace"},
					&cli.StringFlag{Name: "kind", Usage: `"" for a custom topic, "namespace" for a namespace topic (CloudEvents; push or queue subscriptions)`}),
				Action: func(c *cli.Context) error {
					var out armTopic
					// Without --input-schema the server picks the kind's schema: Event Grid
					// schema for a custom topic, CloudEvents for a namespace topic (the only
					// one it takes).
					body := map[string]any{"properties": router.TopicSpec{InputSchema: c.String("input-schema"), Kind: c.String("kind")}}
					if err := newClient(c, e).do(http.MethodPut, topicPath(c.String("name")), body, &out); err != nil {
						return err
					}
					return printTopics(e, c.String("output"), out)
				},
			},
			{
				Name: "show", Usage: "show a topic", Flags: append(serverFlags(), nameFlag, outputFlag()),
				Action: func(c *cli.Context) error {
					var out armTopic
					if err := newClient(c, e).do(http.MethodGet, topicPath(c.String("name")), nil, &out); err != nil {
						return err
					}
					return printTopics(e, c.String("output"), out)
				},
			},
			{
				Name: "list", Usage: "list topics", Flags: append(serverFlags(), outputFlag()),
				Action: func(c *cli.Context) error {
					var out struct{ Value []armTopic }
					if err := newClient(c, e).do(http.MethodGet, "/admin/topics", nil, &out); err != nil {
						return err
					}
					return printList(e, c.String("output"), out.Value, printTopics)
				},
			},
			{
				Name: "delete", Usage: "delete a topic and its event subscriptions", Flags: append(serverFlags(), nameFlag),
				Action: func(c *cli.Context) error {
					if err := newClient(c, e).do(http.MethodDelete, topicPath(c.String("name")), nil, nil); err != nil {
						return err
					}
					fmt.Fprintln(e.Stdout, "deleted topic", termSafe(c.String("name")))
					return nil
				},
			},
			{
				Name: "key", Usage: "topic access keys",
				Subcommands: []*cli.Command{{
					Name: "list", Usage: "print the topic's key1 and key2", Flags: append(serverFlags(), nameFlag, outputFlag()),
					Action: func(c *cli.Context) error {
						var keys map[string]string
						if err := newClient(c, e).do(http.MethodPost, topicPath(c.String("name"))+"/listKeys", nil, &keys); err != nil {
							return err
						}
						if c.String("output") == "json" {
							return printJSON(e.Stdout, keys)
						}
						fmt.Fprintf(e.Stdout, "key1  %s\nkey2  %s\n", termSafe(keys["key1"]), termSafe(keys["key2"]))
						return nil
					},
				}},
			},
		},
	}
}

// printList prints a listing: in JSON always an array, [] when there is none and an array of
// one when there is one, so a script reads every listing alike; otherwise as print does.
func printList[T any](e env, format string, items []T, print func(env, string, ...T) error) error {
	if format == "json" {
		if items == nil {
			items = []T{}
		}
		return printJSON(e.Stdout, items)
	}
	return print(e, format, items...)
}

// printTopics prints one topic (in JSON an object) or several (an array).
func printTopics(e env, format string, ts ...armTopic) error {
	if format == "json" {
		if len(ts) == 1 {
			return printJSON(e.Stdout, ts[0])
		}
		return printJSON(e.Stdout, ts)
	}
	tab := newTable("NAME", "INPUT SCHEMA", "KIND")
	for _, t := range ts {
		schema, kind := t.Properties.InputSchema, t.Properties.Kind
		switch {
		case schema == "" && kind == router.KindNamespace:
			schema = "CloudEventSchemaV1_0"
		case schema == "":
			schema = "EventGridSchema"
		}
		if kind == "" {
			kind = "custom"
		}
		tab.row(t.Name, schema, kind)
	}
	return tab.write(e.Stdout)
}
