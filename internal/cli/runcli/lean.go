package runcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// Execute runs a 'run' command line (argv without the program name) with
// pflag alone, as the agentkernel binary does: linking cobra, its
// templates and regular expressions, and building its command tree, cost
// each run 0.2 to 0.3 ms (bench/README.md). It handles the forms a run is
// written in — global flags, then "run", then run's flags and the
// command — exactly as the cobra command line of agentkernel-full does
// (TestLeanRunParse in package cli holds the two to the same result).
// Anything else — help, a flag it does not know, a run flag before "run",
// grouped short flags, a parse error — is ErrNeedsFull before anything
// happened, and agentkernel-full, with cobra, answers it.
func (a *App) Execute(argv []string) error {
	o, set, args, err := a.ParseRun(argv)
	if err != nil {
		return err
	}
	if err := a.SetupLogging(); err != nil {
		return err
	}
	return a.RunCommand(context.Background(), o, set, args)
}

// ParseRun parses a 'run' command line (see Execute) into a's global
// flags and run's options; set is the flags given, args the command.
func (a *App) ParseRun(argv []string) (o *RunOptions, set map[string]bool, args []string, err error) {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	BindGlobalFlags(fs, a)
	o = &RunOptions{}
	BindRunFlags(fs, o)
	// The global flags before "run", which cobra parses with run's. Only
	// global flags are taken here (cobra reads others there by its own
	// rules), each found in the same bindings the parse below uses.
	globals := pflag.NewFlagSet("global", pflag.ContinueOnError)
	BindGlobalFlags(globals, &App{})
	i := 0
	for i < len(argv) && argv[i] != "run" {
		f, attached := globalFlagAt(globals, argv[i])
		if f == nil {
			return nil, nil, nil, ErrNeedsFull
		}
		if !attached && f.NoOptDefVal == "" {
			i++ // its value
		}
		i++
	}
	if i >= len(argv) {
		return nil, nil, nil, ErrNeedsFull
	}
	line := append(append([]string{}, argv[:i]...), argv[i+1:]...)
	if err := fs.Parse(line); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, nil, nil, ErrRunHelp
		}
		return nil, nil, nil, ErrNeedsFull // cobra words the error
	}
	return o, ChangedFlags(fs), fs.Args(), nil
}

// ErrRunHelp is ErrNeedsFull for run's --help: agentkernel-full prints
// it, or PrintRunHelp when agentkernel-full is not installed.
var ErrRunHelp = fmt.Errorf("%w: help", ErrNeedsFull)

// PrintRunHelp writes run's help as cobra lays it out, for the
// agentkernel binary without agentkernel-full beside it.
func (a *App) PrintRunHelp(w io.Writer) {
	run := pflag.NewFlagSet("run", pflag.ContinueOnError)
	BindRunFlags(run, &RunOptions{})
	run.BoolP("help", "h", false, "help for run")
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	BindGlobalFlags(global, &App{})
	fmt.Fprintf(w, "%s\n\nUsage:\n  agentkernel run [flags] [--] COMMAND [ARG...]\n\nExamples:\n%s\n\nFlags:\n%s\nGlobal Flags:\n%s",
		RunLong, RunExample, run.FlagUsages(), global.FlagUsages())
}

// globalFlagAt is the global flag arg names ("--name", "--name=v",
// "-n", or "-nVALUE" for a flag that takes a value) and whether its value
// is attached; nil for anything else, grouped short flags included.
func globalFlagAt(globals *pflag.FlagSet, arg string) (f *pflag.Flag, attached bool) {
	switch {
	case strings.HasPrefix(arg, "--") && len(arg) > 2:
		name, _, attached := strings.Cut(arg[2:], "=")
		return globals.Lookup(name), attached
	case len(arg) >= 2 && arg[0] == '-' && arg[1] != '-':
		f := globals.ShorthandLookup(arg[1:2])
		if f == nil || len(arg) > 2 && f.NoOptDefVal != "" {
			return nil, false // unknown, or -qX: grouped switches
		}
		return f, len(arg) > 2
	}
	return nil, false
}
