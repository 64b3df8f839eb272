package runcli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/config"
)

// ExecOptions are the flags of 'exec' and 'attach'.
type ExecOptions struct {
	Env         []string
	Workdir     string
	User        string
	TTY         bool
	Interactive bool
	// Shell is attach's --shell.
	Shell string
}

// BindExecFlags registers exec's flags into fs.
func BindExecFlags(fs *pflag.FlagSet, o *ExecOptions) {
	bindExecEnv(fs, o)
	fs.BoolVarP(&o.TTY, "tty", "t", false, "allocate a pseudo-terminal")
	fs.BoolVarP(&o.Interactive, "interactive", "i", false, "pass stdin to the command")
}

// BindAttachFlags registers attach's flags into fs.
func BindAttachFlags(fs *pflag.FlagSet, o *ExecOptions) {
	fs.StringVar(&o.Shell, "shell", "", "the shell to run (default: /bin/bash if present, else /bin/sh)")
	bindExecEnv(fs, o)
}

// StatsOptions are the flags of 'stats'.
type StatsOptions struct {
	JSON bool
}

// BindStatsFlags registers stats's flags into fs.
func BindStatsFlags(fs *pflag.FlagSet, o *StatsOptions) {
	fs.BoolVar(&o.JSON, "json", false, "print JSON")
}

func bindExecEnv(fs *pflag.FlagSet, o *ExecOptions) {
	fs.StringArrayVarP(&o.Env, "env", "e", nil, "set KEY=VALUE, or pass KEY's value from the host (repeatable)")
	fs.StringVarP(&o.Workdir, "workdir", "w", "", "working directory (default: the sandbox's)")
	fs.StringVarP(&o.User, "user", "u", "", "run as NAME, UID or UID:GID")
}

// SandboxCommandLine is a parsed command line of 'exec', 'attach', 'cp'
// or 'stats'.
type SandboxCommandLine struct {
	// Command is "exec", "attach", "cp" or "stats".
	Command string
	// Name is the sandbox's (cp: the one NAME:/path names; stats: the
	// first NAME, "" for none).
	Name string
	// Args is exec's command, cp's SRC and DEST, stats's NAMEs (none:
	// every sandbox).
	Args []string
	// Exec holds exec's and attach's flags.
	Exec ExecOptions
	// Stats holds stats's flags.
	Stats StatsOptions
}

// ErrCommandHelp is ParseSandboxCommand's answer to -h or --help: the
// agentkernel binary hands the command line to agentkernel-full, whose
// command tree prints the command's help.
var ErrCommandHelp = fmt.Errorf("%w: help", ErrNeedsFull)

// IsSandboxCommand reports whether ParseSandboxCommand reads command
// lines of the command called word.
func IsSandboxCommand(word string) bool {
	return word == "exec" || word == "attach" || word == "cp" || word == "stats"
}

// ParseSandboxCommand is the one parser of the command lines of 'exec',
// 'attach', 'cp' and 'stats', in agentkernel and agentkernel-full alike (cobra's
// commands hand their arguments here, the command's name first, and keep
// only their help and completion). argv, without the program name, is
//
//	[global flags] exec [flags] NAME [--] COMMAND [ARG...]
//	[global flags] attach [flags] NAME
//	[global flags] cp [flags] SRC DEST
//	[global flags] stats [flags] [NAME...]
//
// with the global flags also allowed after the command's name. Exec's
// flags end at NAME ("exec dev ls -l" gives -l to ls); attach's, cp's and
// stats's may come anywhere, as cobra took them. It answers ErrNeedsFull for
// another command line, ErrCommandHelp for -h or --help, and an error as
// cobra gave it (exit status 125) for a flag or argument it refuses; a's
// global flags are set.
func (a *App) ParseSandboxCommand(argv []string) (*SandboxCommandLine, error) {
	fs := pflag.NewFlagSet("agentkernel", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	BindGlobalFlags(fs, a)
	fs.SetInterspersed(false)
	if err := fs.Parse(argv); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNeedsFull, err)
	}
	rest := fs.Args()
	if len(rest) == 0 || fs.ArgsLenAtDash() == 0 || !IsSandboxCommand(rest[0]) {
		return nil, ErrNeedsFull
	}
	l := &SandboxCommandLine{Command: rest[0]}
	// The command's flags join the global ones in the same set (a flag
	// given on both sides of the name counts twice, as in one parse).
	switch l.Command {
	case "exec":
		BindExecFlags(fs, &l.Exec)
	case "attach":
		BindAttachFlags(fs, &l.Exec)
		fs.SetInterspersed(true)
	case "cp":
		fs.SetInterspersed(true)
	case "stats":
		BindStatsFlags(fs, &l.Stats)
		fs.SetInterspersed(true)
	}
	if err := fs.Parse(rest[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, ErrCommandHelp
		}
		return nil, &ExitError{Code: ExitAgentkernel, Err: err, Hint: "see 'agentkernel " + l.Command + " --help'"}
	}
	args := fs.Args()
	switch l.Command {
	case "exec":
		if len(args) == 0 {
			return nil, execUsage("no sandbox NAME and no COMMAND given")
		}
		l.Name, l.Args = args[0], args[1:]
		if len(l.Args) > 0 && l.Args[0] == "--" {
			l.Args = l.Args[1:]
		}
		if len(l.Args) == 0 {
			return nil, execUsage("no COMMAND given to run in sandbox " + strconv.Quote(l.Name))
		}
	case "attach":
		if len(args) == 0 {
			return nil, &ExitError{Code: ExitAgentkernel, Err: errors.New("attach: no sandbox NAME given\nusage: agentkernel attach [flags] NAME"),
				Hint: "see 'agentkernel attach --help'; 'agentkernel sandbox list' shows the running sandboxes"}
		}
		if len(args) != 1 {
			return nil, fmt.Errorf("accepts 1 arg(s), received %d", len(args))
		}
		l.Name = args[0]
	case "cp":
		if len(args) != 2 {
			return nil, fmt.Errorf("accepts 2 arg(s), received %d", len(args))
		}
		sName, _, sRemote := SplitRemote(args[0])
		dName, _, dRemote := SplitRemote(args[1])
		if sRemote == dRemote {
			return nil, UsageError("cp: exactly one of SRC and DEST must be NAME:/path")
		}
		l.Name, l.Args = sName, args
		if dRemote {
			l.Name = dName
		}
		return l, nil
	case "stats":
		// Every NAME becomes a path under the data directory: all are
		// checked before any is looked at.
		for _, n := range args {
			if err := config.ValidateSandboxName(n); err != nil {
				return nil, &ExitError{Code: ExitAgentkernel, Err: err}
			}
		}
		if len(args) > 0 {
			l.Name, l.Args = args[0], args
		}
		return l, nil
	}
	if err := config.ValidateSandboxName(l.Name); err != nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return l, nil
}

// SplitRemote parses cp's NAME:/path; ok is false for a host path.
func SplitRemote(s string) (name, p string, ok bool) {
	name, p, ok = strings.Cut(s, ":")
	if !ok || name == "" || strings.ContainsAny(name, "/.") || config.ValidateSandboxName(name) != nil {
		return "", "", false
	}
	if p == "" {
		p = "/"
	}
	return name, p, true
}

// execUsage is exec's answer to a command line that misses NAME or
// COMMAND: what is missing, and the usage line (exit status 125).
func execUsage(missing string) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("exec: %s\nusage: agentkernel exec [flags] NAME [--] COMMAND [ARG...]", missing),
		Hint: "see 'agentkernel exec --help'; 'agentkernel attach NAME' opens a shell"}
}
