package runcli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
)

// Execute runs a 'run' command line (argv without the program name):
// ParseRun, then the run. Both binaries run a run this way; see ParseRun
// for what it answers instead.
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

// ParseRun is the one parser of a run's command line, in agentkernel and
// in agentkernel-full alike (package cli hands it a run's command line
// whole; cobra's 'run' command keeps only run's place in the root's help
// and completion). argv, without the program name, is
//
//	[flags] run [flags] [--] COMMAND [ARG...]
//
// where the flags are the global ones and run's, before "run" as after
// it (as cobra took them). After "run", flags end at the first argument
// that is not one: "run python3 -c x" gives -c to python3. Whether argv
// is a run at all is prestart.IsRun's answer, the reading that made (or
// did not make) the sandbox thread during start-up; pflag reads the flags
// with the same table of which flag takes a value (prestart's is
// generated from BindGlobalFlags and BindRunFlags:
// TestRunFlagsKnownToPrestart).
//
// It answers ErrNeedsFull for a command line that is not a run (it is
// another command's, which agentkernel-full's command tree answers),
// ErrRunHelp for -h or --help, and a flag pflag refuses as an *ExitError
// (exit status 125) with pflag's own words and the hint to see run's help.
// o are run's options, set the flags given (by long name), args the
// command; a's global flags are set.
func (a *App) ParseRun(argv []string) (o *RunOptions, set map[string]bool, args []string, err error) {
	if !prestart.IsRun(append([]string{"agentkernel"}, argv...)) {
		return nil, nil, nil, ErrNeedsFull
	}
	o = &RunOptions{}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	BindGlobalFlags(fs, a)
	BindRunFlags(fs, o)
	// The flags before "run", then, with the same flag set (a flag given
	// on both sides counts as given twice, as one parse would count it),
	// the rest.
	if err := fs.Parse(argv); err != nil {
		return nil, nil, nil, flagError(err)
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] != "run" || fs.ArgsLenAtDash() == 0 {
		// prestart.IsRun found "run" where pflag did not: their tables
		// differ, which TestRunFlagsKnownToPrestart rules out.
		return nil, nil, nil, UsageError("cannot find 'run' in this command line the way it was first read: %q", argv)
	}
	if err := fs.Parse(rest[1:]); err != nil {
		return nil, nil, nil, flagError(err)
	}
	return o, ChangedFlags(fs), fs.Args(), nil
}

// flagError is ParseRun's answer to pflag's error err.
func flagError(err error) error {
	if errors.Is(err, pflag.ErrHelp) {
		return ErrRunHelp
	}
	return &ExitError{Code: ExitAgentkernel, Err: err, Hint: "see 'agentkernel run --help'"}
}

// ErrRunHelp is ErrNeedsFull for run's --help: the agentkernel binary
// hands it to agentkernel-full, which prints PrintRunHelp (as the
// agentkernel binary does itself when agentkernel-full is not
// installed).
var ErrRunHelp = fmt.Errorf("%w: help", ErrNeedsFull)

// PrintRunHelp writes run's help, laid out as cobra lays out a command's
// help: it is run's help in both binaries, 'agentkernel help run'
// included.
func (a *App) PrintRunHelp(w io.Writer) {
	run := pflag.NewFlagSet("run", pflag.ContinueOnError)
	BindRunFlags(run, &RunOptions{})
	run.BoolP("help", "h", false, "help for run")
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	BindGlobalFlags(global, &App{})
	fmt.Fprintf(w, "%s\n\n%s\n\n%s\n\nUsage:\n  agentkernel run [flags] [--] COMMAND [ARG...]\n\nExamples:\n%s\n%s\n\nFlags:\n%s\nGlobal Flags:\n%s",
		RunLong, RunHabitsHelp, SecretHelp, RunExample, RunHabitsExample, run.FlagUsages(), global.FlagUsages())
}
