package runcli

import "slices"

// TerminalRecorder records what attach's terminal shows (agentkernel-full's,
// over package asciicast). Nil in App: attach --record answers
// ErrNeedsFull, so that the agentkernel binary links no recording.
type TerminalRecorder interface {
	// Start opens the recording r asks for, before the shell starts.
	Start(r RecordRequest) (TerminalRecording, error)
}

// RecordRequest is one recording of an attached terminal.
type RecordRequest struct {
	// Sandbox is the sandbox attached to; File is --record's FILE, ""
	// for the default file.
	Sandbox, File string
	// Cols and Rows are the terminal's size when it begins.
	Cols, Rows int
	// Command is the shell run, for the recording's header.
	Command string
}

// TerminalRecording takes a terminal's output, its input and its
// resizes as they come.
type TerminalRecording interface {
	Output(p []byte) error
	Input(p []byte) error
	Resize(cols, rows int) error
	// Close ends the recording. A recording of nothing (no output,
	// input or resize: the session never began) is removed.
	Close() error
	// Empty reports whether nothing was recorded.
	Empty() bool
	// File is where the recording is written.
	File() string
}

// RecordFlag is attach's --record [FILE]: On when given, File its FILE
// ("" for the default file under the data directory).
type RecordFlag struct {
	On   bool
	File string
}

// recordBare is the value pflag gives --record without "=FILE".
const recordBare = "true"

func (r *RecordFlag) String() string {
	if !r.On {
		return ""
	}
	return r.File
}

// Set takes --record's value: "true" (no value given) is the default
// file.
func (r *RecordFlag) Set(s string) error {
	r.On = true
	r.File = ""
	if s != recordBare {
		r.File = s
	}
	return nil
}

// Type is "boolfunc" so that help shows --record without a value type
// (the usage names [FILE]).
func (r *RecordFlag) Type() string { return "boolfunc" }

// takeRecordFile gives a bare --record the FILE written after it as
// a word of its own ("attach --record s.cast dev", "attach dev --record
// s.cast"): pflag leaves that word among the arguments, where attach
// expects NAME alone. argv is the command line after "attach", args
// what pflag left of it; the result is args without FILE.
func takeRecordFile(o *ExecOptions, argv, args []string) []string {
	if !o.Record.On || o.Record.File != "" || len(args) != 2 {
		return args
	}
	for i, w := range argv {
		if w == "--" {
			break
		}
		if w == "--record" && i+1 < len(argv) {
			if k := slices.Index(args, argv[i+1]); k >= 0 {
				o.Record.File = args[k]
				return slices.Delete(slices.Clone(args), k, k+1)
			}
		}
	}
	return args
}
