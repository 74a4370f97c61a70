package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/schemas/clip"
)

// usageExit is the exit code of a usage error: a command line egrid cannot run (an unknown
// command or flag, a flag value of the wrong kind, a required flag missing, words no flag
// takes), and of the commands' own checks of their flags (-o yaml, --max-events 0).
const usageExit = 2

// usageError is the error of a usage error of the command at path ("egrid topic show"):
// what is wrong, and where the command's flags are described.
func usageError(path, format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...)+fmt.Sprintf("; see `%s --help`", path), usageExit)
}

// checkUsage makes every usage error of app's command line exit usageExit with one line
// naming what is wrong, instead of cli's own handling: exit 1 for an unknown or malformed flag
// and a required flag missing, each after the command's whole help on stdout; exit 3 for an
// unknown command; and words after the flags that no flag takes (`topic show --name x extra`,
// or a flag given after such a word) ignored. A command's Before checks its words and required
// flags, after `--help` is handled and before its flags' Actions and the command run.
func checkUsage(app *cli.App) {
	app.OnUsageError = onUsageError(app.Name, app.Flags)
	app.Before = checkWords(app.Name, nil, false, app.Before)
	// A flag may be shared by several commands (topic's --name): find each command's
	// required flags before any is made optional.
	required := map[*cli.Command][]string{}
	var find func([]*cli.Command)
	find = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			for _, f := range cmd.Flags {
				if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() {
					required[cmd] = append(required[cmd], f.Names()[0])
				}
			}
			find(cmd.Subcommands)
		}
	}
	find(app.Commands)
	var walk func(string, []*cli.Command)
	walk = func(parent string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			path := parent + " " + cmd.Name
			for _, f := range cmd.Flags {
				if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() {
					s, ok := f.(*cli.StringFlag)
					if !ok {
						panic(fmt.Sprintf("%s: required flag --%s is a %T: make checkUsage take it", path, f.Names()[0], f))
					}
					s.Required = false // checked by checkWords
				}
			}
			cmd.OnUsageError = onUsageError(path, cmd.Flags)
			cmd.Before = checkWords(path, required[cmd], len(cmd.Subcommands) == 0, cmd.Before)
			walk(path, cmd.Subcommands)
		}
	}
	walk(app.Name, app.Commands)
}

// checkWords is the Before of the command at path: the words after its flags must name one of
// its subcommands (for a leaf, the help cli adds), and its required flags must be set; then
// next runs, when there is one.
func checkWords(path string, required []string, leaf bool, next cli.BeforeFunc) cli.BeforeFunc {
	return func(c *cli.Context) error {
		args := c.Args()
		if sub := c.Command.Command(args.First()); args.Present() && sub != nil && sub.Name == helpCommandName {
			// Help needs no required flag (`topic show help`, like `topic show --help`).
			return checkHelpWords(path, c.Command, leaf, args.Tail())
		}
		if args.Present() && c.Command.Command(args.First()) == nil {
			switch {
			case !leaf:
				return usageError(path, "unknown command %q", clip.String(args.First()))
			case args.Len() == 1:
				return usageError(path, "unexpected argument %q: every value goes after its flag, and flags before any other word", clip.String(args.First()))
			default:
				return usageError(path, "unexpected arguments %q: every value goes after its flag, and flags before any other word", clip.String(strings.Join(args.Slice(), " ")))
			}
		}
		var missing []string
		for _, name := range required {
			if !c.IsSet(name) {
				missing = append(missing, flagName(name))
			}
		}
		switch len(missing) {
		case 0:
		case 1:
			return usageError(path, "%s is required", missing[0])
		default:
			return usageError(path, "%s and %s are required", strings.Join(missing[:len(missing)-1], ", "), missing[len(missing)-1])
		}
		if next != nil {
			return next(c)
		}
		return nil
	}
}

// helpCommandName is the name of the help subcommand cli gives every command (alias h).
const helpCommandName = "help"

// checkHelpWords checks the words after the help subcommand of cmd, the command at path: none
// for a leaf; for a command grouping others, at most the name of one of them. cli's help would
// exit 3 with "No help topic" for a name it does not know, print its usage and exit 1 for an
// unknown flag, and ignore any further word.
func checkHelpWords(path string, cmd *cli.Command, leaf bool, words []string) error {
	var names []string
	for _, w := range words {
		switch {
		case w == "-h" || w == "--help" || w == "-help":
		case looksLikeFlag(w):
			name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
			return usageError(path+" "+helpCommandName, "unknown flag %s", flagName(clip.String(name)))
		default:
			names = append(names, w)
		}
	}
	switch {
	case len(names) == 0:
		return nil
	case leaf && len(names) == 1:
		return usageError(path, "unexpected argument %q after help, which takes none", clip.String(names[0]))
	case leaf:
		return usageError(path, "unexpected arguments %q after help, which takes none", clip.String(strings.Join(names, " ")))
	case len(names) > 1:
		return usageError(path, "unexpected arguments %q after help, which takes one command's name", clip.String(strings.Join(names, " ")))
	case cmd.Command(names[0]) == nil:
		return usageError(path, "unknown command %q", clip.String(names[0]))
	}
	return nil
}

// onUsageError turns the flag package's parse errors for the command at path, whose flags are
// flags, into usage errors in egrid's words.
func onUsageError(path string, flags []cli.Flag) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
			return usageError(path, "unknown flag %s", flagName(name))
		}
		if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
			return usageError(path, "%s needs a value", flagName(name))
		}
		var value, name string
		if n, _ := fmt.Sscanf(msg, "invalid value %q for flag -%s", &value, &name); n == 2 {
			name = strings.TrimSuffix(name, ":")
			return usageError(path, "%s %q is not %s", flagName(name), clip.String(value), valueKind(flags, name))
		}
		if n, _ := fmt.Sscanf(msg, "invalid boolean value %q for -%s", &value, &name); n == 2 {
			name = strings.TrimSuffix(name, ":")
			return usageError(path, "%s=%q is not true or false", flagName(name), clip.String(value))
		}
		return usageError(path, "%s", msg)
	}
}

// flagName is how a flag is written: -o, --name.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// valueKind says what the flag named name among flags takes.
func valueKind(flags []cli.Flag, name string) string {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			switch f.(type) {
			case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
				return "a whole number"
			case *cli.Float64Flag:
				return "a number"
			case *cli.DurationFlag:
				return "a duration such as 30s, 5m or 1h30m"
			}
		}
	}
	return "a value it takes"
}
