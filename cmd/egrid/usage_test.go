package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestUsageErrorsExit2: every usage error (an unknown command, an unknown flag, a flag value
// of the wrong kind, a required flag missing, words no flag takes) exits 2 as the commands' own
// checks do (--max-events 0, -o yaml), before the command does anything, with one message on
// stderr naming what is wrong and the command's --help, and nothing on stdout.
func TestUsageErrorsExit2(t *testing.T) {
	// No server listens on port 1: a command that ran would fail with exit 1, not 2.
	server := "--server=http://127.0.0.1:1"
	for _, tc := range []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"unknown command", []string{"nosuchcmd"}, []string{`unknown command "nosuchcmd"`, "egrid --help"}},
		{"unknown subcommand", []string{"topic", "nosuch", server}, []string{`unknown command "nosuch"`, "egrid topic --help"}},
		{"unknown flag", []string{"topic", "list", server, "--bogus"}, []string{"unknown flag --bogus", "egrid topic list --help"}},
		{"unknown global flag", []string{"--bogus"}, []string{"unknown flag --bogus", "egrid --help"}},
		{"unknown short flag", []string{"topic", "list", "-x"}, []string{"unknown flag -x", "egrid topic list --help"}},
		{"flag without its value", []string{"topic", "show", server, "--name"}, []string{"--name needs a value", "egrid topic show --help"}},
		{"not a number", []string{"receive", "--pull", server, "--topic", "t", "--subscription", "s", "--max-events", "abc"},
			[]string{`--max-events "abc"`, "a whole number", "egrid receive --help"}},
		{"not a duration", []string{"deadletter", "replay", server, "--idle-timeout", "soon"},
			[]string{`--idle-timeout "soon"`, "a duration", "egrid deadletter replay --help"}},
		{"required flag missing", []string{"topic", "show", server}, []string{"--name is required", "egrid topic show --help"}},
		{"required flags missing", []string{"event-subscription", "show", server}, []string{"--topic and --name are required", "egrid event-subscription show --help"}},
		{"unexpected words", []string{"topic", "show", "--name", "x", "extra", "args", server},
			[]string{`unexpected arguments "extra args --server=http://127.0.0.1:1"`, "egrid topic show --help"}},
		{"unexpected word", []string{"validate", "--config", "egrid.yaml", "extra"}, []string{`unexpected argument "extra"`, "egrid validate --help"}},
		{"help of an unknown command", []string{"topic", "help", "nosuch"}, []string{`unknown command "nosuch"`, "egrid topic --help"}},
		{"help of two commands", []string{"topic", "help", "list", "show"}, []string{`unexpected arguments "list show"`, "egrid topic --help"}},
		{"help with an unknown flag", []string{"topic", "help", "-x"}, []string{"unknown flag -x", "egrid topic help --help"}},
		{"words after a command's help", []string{"topic", "show", "help", "nosuch"}, []string{`unexpected argument "nosuch" after help`, "egrid topic show --help"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"egrid"}, tc.args...), env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
			if code != 2 {
				t.Errorf("egrid %s: exit %d, want 2; stderr %q", strings.Join(tc.args, " "), code, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("egrid %s: stderr %q, want it to say %q", strings.Join(tc.args, " "), stderr.String(), w)
				}
			}
			if strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("egrid %s: stderr %q, want one line", strings.Join(tc.args, " "), stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("egrid %s: stdout %q, want nothing", strings.Join(tc.args, " "), stdout.String())
			}
		})
	}
}

// TestHelpIsNoUsageError: asking for help, or a command that only groups others, still prints
// help and exits 0.
func TestHelpIsNoUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"topic"}, {"topic", "--help"}, {"topic", "help", "list"}, {"topic", "show", "--help"},
		{"deadletter", "replay", "-h"}, {"version"}, {"topic", "help"}, {"topic", "h", "show"}, {"topic", "list", "help"},
		{"topic", "show", "help"}, // no --name: help needs no required flag
	} {
		code, out := cliRun(t, args...)
		if code != 0 || out == "" {
			t.Errorf("egrid %s: exit %d, %q; want help and exit 0", strings.Join(args, " "), code, out)
		}
	}
}

// TestHelpOfAnUnknownCommandExits2: at every level, `<command> help nosuch` is a usage error
// like `<command> nosuch`, exit 2 with one line naming the command's --help; cli's own help
// exited 3 with "No help topic for 'nosuch'".
func TestHelpOfAnUnknownCommandExits2(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			p := append(append([]string(nil), path...), cmd.Name)
			args := append(append([]string(nil), p...), "help", "nosuch")
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"egrid"}, args...), env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
			want := "see `egrid " + strings.Join(p, " ") + " --help`"
			if code != usageExit || !strings.Contains(stderr.String(), want) || strings.Count(stderr.String(), "\n") != 1 || stdout.Len() != 0 {
				t.Errorf("egrid %s: exit %d, stderr %q, stdout %q; want exit 2 and one line saying %q", strings.Join(args, " "), code, stderr.String(), stdout.String(), want)
			}
			walk(p, cmd.Subcommands)
		}
	}
	walk(nil, newApp(env{}).Commands)
}
