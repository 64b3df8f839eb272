package agent

import "github.com/agentkernel/agentkernel/internal/sandbox"

// Ops of a Request.
const (
	// OpExec runs a command; three descriptors (stdin, stdout, stderr)
	// are attached.
	OpExec = "exec"
	// OpSignal sends Signal to the command started by request Target.
	OpSignal = "signal"
	// OpRead writes the file at Path to the attached descriptor.
	OpRead = "read"
	// OpWrite creates or truncates the file at Path (parents created) and
	// fills it from the attached descriptor.
	OpWrite = "write"
	// OpDelete removes the file or (empty, or with Recursive) directory
	// at Path.
	OpDelete = "delete"
	// OpList lists the directory at Path.
	OpList = "list"
	// OpStat describes Path.
	OpStat = "stat"
	// OpTarOut writes a tar stream of Path (file or directory, named by
	// its base name) to the attached descriptor.
	OpTarOut = "tar-out"
	// OpTarIn extracts the tar stream read from the attached descriptor
	// into the directory Path (created if missing).
	OpTarIn = "tar-in"
	// OpStats reports resource usage as the sandbox sees it (uptime,
	// its processes, the agent's resident set); the client adds what the
	// host sees (cgroup memory and CPU).
	OpStats = "stats"
	// OpStop stops the sandbox: SIGTERM to every process, SIGKILL after
	// a grace period, then the agent exits.
	OpStop = "stop"
	// OpPing checks that the peer is alive.
	OpPing = "ping"
	// OpDetach starts Exec as a detached command, owned by the server:
	// stdin empty, stdout and stderr kept in files (no descriptors
	// attached); answered once, with Detached.
	OpDetach = "detach"
	// OpDetached lists the detached commands (CmdID "") or describes
	// CmdID, in Detached.
	OpDetached = "detached"
	// OpDetachedLogs writes Stream ("stdout" or "stderr") of detached
	// command CmdID, from Offset, to the attached descriptor.
	OpDetachedLogs = "detached-logs"
	// OpDetachedKill kills detached command CmdID and answers once it
	// has ended.
	OpDetachedKill = "detached-kill"
)

// KindNotFound is a Response's Kind for a detached command that does not
// exist, KindRange for a log offset past the end, KindLimit for a
// detached command refused because the sandbox runs too many.
const (
	KindNotFound = "not-found"
	KindRange    = "range"
	// KindLimit answers a detach past sandbox.MaxDetachedRunning.
	KindLimit = "limit"
)

// Request is one message to the supervisor or the agent.
type Request struct {
	ID     uint64       `json:"id"`
	Op     string       `json:"op"`
	Exec   *ExecRequest `json:"exec,omitempty"`
	Target uint64       `json:"target,omitempty"`
	Signal int          `json:"signal,omitempty"`
	Path   string       `json:"path,omitempty"`
	// Mode of a written file (0 means 0644).
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	// CmdID names a detached command; Stream and Offset select what of
	// its output OpDetachedLogs writes.
	CmdID  string `json:"cmd_id,omitempty"`
	Stream string `json:"stream,omitempty"`
	Offset int64  `json:"offset,omitempty"`
}

// ExecRequest is a command to run in a running sandbox. Empty fields
// take the sandbox's defaults (image's working directory and user).
type ExecRequest struct {
	Args    []string `json:"args"`
	Env     []string `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	User    string   `json:"user,omitempty"`
	TTY     bool     `json:"tty,omitempty"`
	// TimeoutMS > 0 (detached commands) kills the command once it has
	// run that long.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// Response answers a Request (same ID).
type Response struct {
	ID uint64 `json:"id"`
	// Started: the command runs as Pid (in the sandbox's PID namespace
	// as the agent sees it).
	Started bool `json:"started,omitempty"`
	Pid     int  `json:"pid,omitempty"`
	// Exited: Status is the command's wait status.
	Exited bool `json:"exited,omitempty"`
	Status int  `json:"status,omitempty"`
	// OOMKills (with Exited) is how many of the sandbox's processes the
	// memory limit's OOM killer ended while the command ran, MemoryMB
	// that limit in MiB.
	OOMKills int   `json:"oom_kills,omitempty"`
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// Error says why the request failed, Kind what failed (KindExec,
	// KindSetup, KindPath, KindRefused) and Errno, when not 0, the error
	// number behind it. Clients judge a failure by Kind and Errno
	// (ResponseError), never by Error's text.
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Errno int    `json:"errno,omitempty"`

	Entries []Entry `json:"entries,omitempty"`
	Stat    *Entry  `json:"stat,omitempty"`
	Stats   *Stats  `json:"stats,omitempty"`
	// Size is the number of bytes read or written.
	Size int64 `json:"size,omitempty"`
	// Detached are the detached commands an OpDetach, OpDetached or
	// OpDetachedKill answers with.
	Detached []sandbox.DetachedCommand `json:"detached,omitempty"`
}

// Entry describes one file.
type Entry struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // Go's fs.FileMode bits
	ModTime int64  `json:"mtime"`
	Link    string `json:"link,omitempty"`
}

// Stats are a running sandbox's resource usage.
type Stats struct {
	Pids          int     `json:"pids"`
	MemoryBytes   int64   `json:"memory_bytes"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	UpperBytes    int64   `json:"upper_bytes"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	SupervisorRSS int64   `json:"supervisor_rss"`
	InitRSS       int64   `json:"init_rss"`
}
