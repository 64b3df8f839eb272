package runcli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ExecOptions are the flags of 'exec' and 'attach'.
type ExecOptions struct {
	Env []string
	// EnvStdin is --env-stdin: more of the environment, read from the
	// beginning of stdin as one block (internal/envblock), for callers
	// that must keep values off the command line.
	EnvStdin    bool
	Workdir     string
	User        string
	TTY         bool
	Interactive bool
	// Shell is attach's --shell.
	Shell string
	// Sudo runs the command as root (uid and gid 0) in the sandbox.
	Sudo bool
	// Timeout > 0 kills the command once it has run that long (exit
	// status 124).
	Timeout time.Duration
	// Detach starts the command as a detached one (exec -d).
	Detach bool
	// Detached-command management (DetachedOp): --list, --status ID,
	// --logs ID (Stderr, Offset), --kill ID; JSON prints JSON.
	List   bool
	Status string
	Logs   string
	Kill   string
	Stderr bool
	Offset int64
	JSON   bool
	// Receipt is --receipt FILE: a signed execution receipt of the
	// command.
	Receipt string
	// Output, when set, takes the command's stdout and stderr (a run's
	// receipt, PersistentRun.Output).
	Output *OutputTee
	// Record is attach's --record [FILE]; RecordInput its
	// --record-input.
	Record      RecordFlag
	RecordInput bool
	// recording, when set, takes what the terminal shows (and, with
	// RecordInput, what is typed) and its resizes.
	recording TerminalRecording
}

// DetachedOp is the detached-command operation o asks for ("list",
// "status", "logs", "kill"), "" for none.
func (o *ExecOptions) DetachedOp() string {
	switch {
	case o.List:
		return "list"
	case o.Status != "":
		return "status"
	case o.Logs != "":
		return "logs"
	case o.Kill != "":
		return "kill"
	}
	return ""
}

// BindExecFlags registers exec's flags into fs.
func BindExecFlags(fs *pflag.FlagSet, o *ExecOptions) {
	bindExecEnv(fs, o)
	fs.BoolVarP(&o.TTY, "tty", "t", false, "allocate a pseudo-terminal")
	fs.BoolVarP(&o.Interactive, "interactive", "i", false, "pass stdin to the command")
	fs.BoolVar(&o.EnvStdin, "env-stdin", false, "read more KEY=VALUE entries from the beginning of stdin as one length-prefixed block, before the command's own stdin (for programs that pipe the environment, such as the nomad backend: values stay off the command line)")
	fs.BoolVar(&o.Sudo, "sudo", false, "run as root (uid 0) inside the sandbox: root of the sandbox's own user namespace, never the host's")
	fs.DurationVar(&o.Timeout, "timeout", 0, "kill the command once it has run this long (e.g. 30s, 5m): exit status 124")
	fs.BoolVarP(&o.Detach, "detach", "d", false, "run the command detached: print its ID and return; it runs on in the sandbox")
	fs.BoolVar(&o.List, "list", false, "list the sandbox's detached commands (exec --list NAME)")
	fs.StringVar(&o.Status, "status", "", "show detached command ID (exec --status ID NAME)")
	fs.StringVar(&o.Logs, "logs", "", "print the output of detached command ID (exec --logs ID NAME)")
	fs.StringVar(&o.Kill, "kill", "", "kill detached command ID (exec --kill ID NAME)")
	fs.BoolVar(&o.Stderr, "stderr", false, "with --logs: print its stderr instead of its stdout")
	fs.Int64Var(&o.Offset, "offset", 0, "with --logs: start at this byte of the stream")
	fs.BoolVar(&o.JSON, "json", false, "with -d, --list, --status, --kill: print JSON")
	fs.StringVar(&o.Receipt, "receipt", "", "write a signed execution receipt of the command to `FILE` ('agentkernel receipt verify FILE' checks it; not with -d)")
}

// BindAttachFlags registers attach's flags into fs.
func BindAttachFlags(fs *pflag.FlagSet, o *ExecOptions) {
	fs.StringVar(&o.Shell, "shell", "", "the shell to run (default: /bin/bash if present, else /bin/sh)")
	bindExecEnv(fs, o)
	f := fs.VarPF(&o.Record, "record", "", "record the session (asciicast v2) to `[FILE]`: a .cast file, a directory, or with no FILE <data-dir>/recordings/NAME-YYYYMMDD-HHMMSS.cast")
	f.NoOptDefVal = recordBare
	fs.BoolVar(&o.RecordInput, "record-input", false, "with --record: record what is typed too (passwords typed into the shell included)")
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
		if err := checkExecFlags(&l.Exec, args); err != nil {
			return nil, err
		}
		if l.Exec.DetachedOp() != "" {
			l.Name = args[0]
			break
		}
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
		args = takeRecordFile(&l.Exec, rest[1:], args)
		if l.Exec.RecordInput && !l.Exec.Record.On {
			return nil, &ExitError{Code: ExitAgentkernel, Err: errors.New("attach: --record-input goes with --record"), Hint: "see 'agentkernel attach --help'"}
		}
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

// checkExecFlags refuses exec's flags that do not go together, and a
// detached-command operation's command line that is not one NAME.
func checkExecFlags(o *ExecOptions, args []string) error {
	bad := func(msg string) error {
		return &ExitError{Code: ExitAgentkernel, Err: errors.New("exec: " + msg), Hint: "see 'agentkernel exec --help'"}
	}
	ops := 0
	for _, set := range []bool{o.List, o.Status != "", o.Logs != "", o.Kill != ""} {
		if set {
			ops++
		}
	}
	switch {
	case ops > 1:
		return bad("--list, --status, --logs and --kill go one at a time")
	case o.Sudo && o.User != "":
		return bad("--sudo and --user go one at a time (--sudo is --user 0:0)")
	case o.Timeout < 0:
		return bad("--timeout must be positive")
	case o.Detach && (o.TTY || o.Interactive):
		return bad("a detached command (-d) has no terminal and no stdin: drop -t and -i")
	case (o.Stderr || o.Offset != 0) && o.Logs == "":
		return bad("--stderr and --offset go with --logs ID")
	case o.Offset < 0:
		return bad("--offset must be 0 or more")
	case o.Receipt != "" && o.Detach:
		return bad("--receipt and -d go one at a time: a detached command's outcome is not known when exec returns")
	}
	if ops == 0 {
		return nil
	}
	if o.Detach || o.TTY || o.Interactive || o.Timeout != 0 || o.Sudo || len(o.Env) > 0 || o.EnvStdin || o.Workdir != "" || o.User != "" || o.Receipt != "" {
		return bad("--list, --status, --logs and --kill take no command flags")
	}
	if len(args) != 1 {
		return bad("--list, --status, --logs and --kill take the sandbox NAME alone\nusage: agentkernel exec --list NAME | --status ID NAME | --logs ID [--stderr] [--offset N] NAME | --kill ID NAME")
	}
	for _, id := range []string{o.Status, o.Logs, o.Kill} {
		if id != "" {
			if err := sandbox.ValidDetachedID(id); err != nil {
				return bad(err.Error())
			}
		}
	}
	return nil
}

// execUsage is exec's answer to a command line that misses NAME or
// COMMAND: what is missing, and the usage line (exit status 125).
func execUsage(missing string) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("exec: %s\nusage: agentkernel exec [flags] NAME [--] COMMAND [ARG...]", missing),
		Hint: "see 'agentkernel exec --help'; 'agentkernel attach NAME' opens a shell"}
}
