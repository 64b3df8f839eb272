// Package daemon is the local face of a background agentkernel server
// ('agentkernel daemon start'): where its files live, and the run socket
// through which 'agentkernel run' hands a command to the daemon's warm
// pools instead of building a sandbox itself.
//
// The run socket is a SOCK_SEQPACKET unix socket (message boundaries for
// free, and descriptors travel with a message). A client sends one request
// as JSON: {"op":"run","spec":…} with its own stdin, stdout and stderr
// attached (SCM_RIGHTS), so the command writes straight to the client's
// terminal or pipes and reads its stdin, exactly as a direct run would;
// then any number of {"signal":N} messages (the client's Ctrl-C,
// SIGTERM, …); the daemon answers with one reply and closes. A client
// that goes away (its end closes) ends its command. {"op":"prewarm"}
// fills the pool of a spec. Only processes of the daemon's own uid may
// connect (SO_PEERCRED); the socket also lives in a 0700 directory.
//
// HTTP over a unix socket would do for the reply but not for the
// descriptors, and a terminal's stdin must reach the command itself, not
// a copy loop in another process that would go on reading the user's
// keystrokes after the command ended.
package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Paths are the daemon's files under the data directory.
type Paths struct {
	Dir     string // DataDir/daemon, mode 0700
	API     string // HTTP API unix socket
	Run     string // run socket (this package)
	PIDFile string
	Log     string
}

// PathsFor returns the daemon's paths for a data directory.
func PathsFor(dataDir string) Paths {
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	d := filepath.Join(dataDir, "daemon")
	return Paths{Dir: d, API: filepath.Join(d, "api.sock"), Run: filepath.Join(d, "run.sock"),
		PIDFile: filepath.Join(d, "daemon.pid"), Log: filepath.Join(d, "daemon.log")}
}

// PID returns the pid recorded in the pid file when that process is
// alive, else 0.
func (p Paths) PID() int {
	b, err := os.ReadFile(p.PIDFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	// A pid file left by a daemon that died may name a process that
	// reused its pid: only an agentkernel daemon of this data directory
	// counts (its command line says so).
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return 0
	}
	args := strings.Split(string(cmdline), "\x00")
	if !slices.Contains(args, "--daemon") || !slices.Contains(args, "serve") {
		return 0
	}
	if dataDir := filepath.Dir(p.Dir); !slices.Contains(args, dataDir) {
		return 0
	}
	return pid
}

// maxRequest bounds a request message (a spec with a large environment
// does not fit: such runs do not use the daemon).
const maxRequest = 128 << 10

// Request is the first message of a connection.
type Request struct {
	Op string `json:"op"` // "run" or "prewarm"
	// Build identifies the client's agentkernel binary (BuildID): a
	// daemon of another build (an upgrade since it started) does not
	// serve it, since the spec's format may differ.
	Build string        `json:"build"`
	Spec  *sandbox.Spec `json:"spec"`
	Count int           `json:"count,omitempty"` // prewarm: sandboxes to keep ready
	// Quiet: the client runs with --quiet (no warnings on its stderr).
	Quiet bool `json:"quiet,omitempty"`
}

// control is a later client message.
type control struct {
	Signal int `json:"signal"`
}

// Reply is the daemon's one answer.
type Reply struct {
	ExitCode int  `json:"exit_code"`
	Signal   int  `json:"signal,omitempty"`
	TimedOut bool `json:"timed_out,omitempty"`
	// OOMKills is sandbox.Result.OOMKills.
	OOMKills int `json:"oom_kills,omitempty"`
	// Error is the failure's text, for people; Kind is what it is, for
	// the client (errorKinds): a kind it does not know is a plain error.
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// Served says how the run was served: hit (a warm sandbox) or
	// prepared (a sandbox prepared for it).
	Served string `json:"served,omitempty"`
	// NetworkSummary is the line naming what the sandbox's network policy
	// refused (sandbox.Result.NetworkSummary).
	NetworkSummary string `json:"network_summary,omitempty"`
}

// errorKinds are the kinds of failure a reply names, with the error the
// daemon's side matches (errors.Is, in this order: a refusal also
// matches ErrCannotInvoke) and the sentinels the client's error then
// wraps, so that the CLI maps it to the exit status of a direct run.
var errorKinds = []struct {
	kind  string
	match error
	is    []error
}{
	{"not_found", sandbox.ErrNotFound, []error{sandbox.ErrNotFound}},
	{"command_refused", sandbox.ErrCommandRefused, []error{sandbox.ErrCommandRefused, sandbox.ErrCannotInvoke}},
	{"cannot_invoke", sandbox.ErrCannotInvoke, []error{sandbox.ErrCannotInvoke}},
	{"unsupported", sandbox.ErrUnsupported, []error{ErrNotServed}},
	{"stale", ErrStale, []error{ErrStale}},
}

// errorReply turns an error into a reply.
func errorReply(err error) Reply {
	r := Reply{Error: err.Error()}
	for _, k := range errorKinds {
		if errors.Is(err, k.match) {
			r.Kind = k.kind
			break
		}
	}
	return r
}

// replyError is a failure reported by the daemon: its text as the
// daemon wrote it, and the sentinels of its kind.
type replyError struct {
	msg string
	is  []error
}

func (e *replyError) Error() string   { return e.msg }
func (e *replyError) Unwrap() []error { return e.is }

// err turns a reply's error back into one the CLI maps to exit codes.
func (r Reply) err() error {
	if r.Error == "" {
		return nil
	}
	for _, k := range errorKinds {
		if k.kind == r.Kind {
			return &replyError{msg: r.Error, is: k.is}
		}
	}
	return errors.New(r.Error)
}

// BuildID identifies the running binary (BuildIDOf os.Executable). The
// daemon is agentkernel-full; a client that is the agentkernel binary
// sends BuildIDOf its agentkernel-full instead (Client.Build).
func BuildID() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return BuildIDOf(exe)
}

// BuildIDOf identifies the binary at path by its size and modification
// time: a binary replaced by an upgrade has another.
func BuildIDOf(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d-%d", st.Size(), st.ModTime().UnixNano())
}

// ErrStale: the daemon runs another build of agentkernel; nothing ran.
var ErrStale = errors.New("the running agentkernel daemon is another build of agentkernel")

// ErrNoDaemon: no daemon answers on the run socket. ErrNotServed: the
// daemon cannot run this spec (nothing was run). Either way the caller
// runs the command itself.
var (
	ErrNoDaemon  = errors.New("no agentkernel daemon is running")
	ErrNotServed = errors.New("the daemon cannot run this command")
)

func encode(v any) ([]byte, error) { return json.Marshal(v) }
