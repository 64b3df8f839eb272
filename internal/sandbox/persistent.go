package sandbox

import (
	"context"
	"io"
	"os"
	"time"
)

// Status values of a persistent sandbox: the API promises these two only.
const (
	StatusRunning = "running"
	StatusStopped = "stopped"
)

// Info is a persistent sandbox as the faces show it: its record in the
// state store with the status reconciled with reality.
type Info struct {
	Name        string `json:"name"`
	UUID        string `json:"uuid"`
	Image       string `json:"image"`
	ImageDigest string `json:"image_digest,omitempty"`
	// RequestedImage is the image that was asked for when the host's
	// own tools run instead (Image is then "host").
	RequestedImage string `json:"requested_image,omitempty"`
	Backend        string `json:"backend"`
	Status         string `json:"status"`
	// StopReason says why a stopped sandbox stopped ("stopped by user",
	// "supervisor (pid N) exited unexpectedly", …).
	StopReason  string            `json:"stop_reason,omitempty"`
	Profile     string            `json:"profile,omitempty"`
	Resources   Resources         `json:"resources"`
	Labels      map[string]string `json:"labels,omitempty"`
	Description string            `json:"description,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	// LastActivityAt is the last start, stop or exec.
	LastActivityAt time.Time  `json:"last_activity_at"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	// SupervisorPID is the host pid of the supervisor while running.
	SupervisorPID int `json:"supervisor_pid,omitempty"`
	// Dir is where the sandbox's files live on the host.
	Dir string `json:"dir,omitempty"`
	// Network is the sandbox's network mode; IP its address inside (with
	// egress, none while it runs in proxy mode); Ports the ports published
	// from the host.
	Network NetworkMode   `json:"network,omitempty"`
	IP      string        `json:"ip,omitempty"`
	Ports   []PortMapping `json:"ports,omitempty"`
}

// ImageLabel is the image as the faces print it: "host (fallback for
// node:22-alpine)" for a sandbox that runs the host's tools in place of
// the image it asked for.
func (i *Info) ImageLabel() string { return ImageLabel(i.Image, i.RequestedImage) }

// ImageLabel names what runs: image, or the host fallback for requested.
func ImageLabel(image, requested string) string {
	if requested == "" {
		return image
	}
	return image + " (fallback for " + requested + ")"
}

// ExecRequest is a command to run in a running sandbox. Empty fields take
// the sandbox's defaults (the image's working directory and user).
type ExecRequest struct {
	Args    []string
	Env     []string // KEY=VALUE
	Workdir string
	User    string
	// TTY: Stdio's three streams are one terminal (the face set it up).
	TTY bool
	// Timeout > 0 ends the command (SIGKILL) once it has run that long:
	// Exec then reports exit code 124 with Result.TimedOut.
	Timeout time.Duration
	// Recording is the file the face records the command's terminal to
	// (attach --record), for the audit entry; "" for none.
	Recording string
}

// FileInfo describes one file in a sandbox.
type FileInfo struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Mode    os.FileMode `json:"mode"`
	ModTime time.Time   `json:"mtime"`
	Link    string      `json:"link,omitempty"`
}

// Usage is one sandbox's resource use. Fields a stopped sandbox cannot
// report stay zero.
type Usage struct {
	Name        string  `json:"name"`
	Status      string  `json:"status"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	CPUPercent  float64 `json:"cpu_percent"`
	MemoryBytes int64   `json:"memory_bytes"`
	Pids        int     `json:"pids"`
	// UpperBytes is the disk used by the writable layer.
	UpperBytes    int64   `json:"upper_bytes"`
	UptimeSeconds float64 `json:"uptime_seconds,omitempty"`
	// SupervisorRSS and InitRSS are the resident sets of the host-side
	// processes that keep the sandbox (not counted in MemoryBytes).
	SupervisorRSS int64 `json:"supervisor_rss,omitempty"`
	InitRSS       int64 `json:"init_rss,omitempty"`
}

// HostUsage is the machine's totals.
type HostUsage struct {
	CPUs             int     `json:"cpus"`
	CPUPercent       float64 `json:"cpu_percent"`
	Load1            float64 `json:"load1"`
	MemoryTotalBytes int64   `json:"memory_total_bytes"`
	MemoryUsedBytes  int64   `json:"memory_used_bytes"`
	// DataDirBytes is the disk used under the data directory, and
	// DiskFreeBytes what its file system has left.
	DataDirBytes  int64 `json:"data_dir_bytes"`
	DiskFreeBytes int64 `json:"disk_free_bytes"`
	Sandboxes     int   `json:"sandboxes"`
	Running       int   `json:"running"`
}

// The mechanism under persistent sandboxes, in four parts the Manager
// takes separately (ManagerOptions): the records (Store), their
// processes (Supervisor), connections to running ones (Connector) and
// what the host sees of them (HostStats). Package supervisor implements
// all four (one supervisor process per running sandbox, records in
// SQLite); the Manager adds the policy on top (names, labels, TTLs,
// audit), so that every face gets the same behaviour from one call.
// Implementations wrap the errors of errors.go (ErrSandboxNotFound, …).

// Store keeps the records of persistent sandboxes: what each was
// created with and its status, reconciled with reality on every read.
type Store interface {
	// Create records a new, stopped sandbox; it assigns info.UUID and
	// spec.ID. ErrSandboxExists when the name is taken.
	Create(ctx context.Context, info *Info, spec *Spec) error
	// Get returns the sandbox (ErrSandboxNotFound).
	Get(ctx context.Context, name string) (*Info, error)
	// List returns every sandbox, oldest first.
	List(ctx context.Context) ([]*Info, error)
	// Update changes the record of name in one transaction (labels,
	// description, expiry).
	Update(ctx context.Context, name string, fn func(*Info) error) (*Info, error)
	// Remove deletes a stopped sandbox and its files; force stops it
	// first. ErrRunning without force.
	Remove(ctx context.Context, name string, force bool) error
	// Spec returns the spec the sandbox runs with (the one recorded at
	// create); Exec checks its command rules.
	Spec(ctx context.Context, name string) (*Spec, error)
}

// Supervisor starts and stops persistent sandboxes and collects what
// the ended ones left behind.
type Supervisor interface {
	// Start starts the sandbox (no-op when running).
	Start(ctx context.Context, name string) (*Info, error)
	// Stop stops it (no-op when stopped); reason is kept.
	Stop(ctx context.Context, name, reason string) (*Info, error)
	// GC removes expired sandboxes, leftovers of dead supervisors and
	// orphaned directories; with dryRun it only says what it would.
	GC(ctx context.Context, dryRun bool) (GCResult, error)
}

// GCResult is what a GC removed (with dryRun: what it would remove).
type GCResult struct {
	// Sandboxes are the names of the expired sandboxes removed.
	Sandboxes []string
	// Removed describes everything removed, one line each, for people:
	// the sandboxes ("sandbox NAME (expired)"), then cgroups, host id
	// ranges, directories and snapshot layers.
	Removed []string
}

// Connector opens connections to running persistent sandboxes.
type Connector interface {
	// Connect opens a connection to a running sandbox (ErrNotRunning).
	Connect(ctx context.Context, name string) (Conn, error)
}

// HostStats reports what the host sees of persistent sandboxes.
type HostStats interface {
	// DiskUsage is the size of the sandbox's writable layer.
	DiskUsage(ctx context.Context, name string) (int64, error)
	// Host reports the machine's totals (Sandboxes and Running are
	// filled by the Manager).
	Host(ctx context.Context) (HostUsage, error)
}

// Conn is a connection to one running sandbox.
type Conn interface {
	// Exec runs req with stdio and returns how it ended; signals
	// received on signals are forwarded to it. Failures to start wrap
	// ErrNotFound (127) or ErrCannotInvoke (126).
	Exec(ctx context.Context, req ExecRequest, stdio Stdio, signals <-chan os.Signal) (Result, error)
	// ReadFile copies the file at path to w.
	ReadFile(ctx context.Context, path string, w io.Writer) (int64, error)
	// WriteFile creates or replaces path (parents created) from r.
	WriteFile(ctx context.Context, path string, r io.Reader, mode os.FileMode) (int64, error)
	// Delete removes path (a directory only with recursive or if empty).
	Delete(ctx context.Context, path string, recursive bool) error
	// List lists the directory at path; Stat describes path.
	List(ctx context.Context, path string) ([]FileInfo, error)
	Stat(ctx context.Context, path string) (FileInfo, error)
	// TarOut writes a tar stream of path; TarIn extracts one into the
	// directory path.
	TarOut(ctx context.Context, path string, w io.Writer) error
	TarIn(ctx context.Context, path string, r io.Reader) error
	// Usage reports the sandbox's resource use.
	Usage(ctx context.Context) (Usage, error)
	Close() error
}

// PathError is a file operation the sandbox refused or could not do.
// Refused is true for paths that are never allowed (/proc, escapes);
// NotExist for a missing file.
type PathError struct {
	Path     string
	Err      error
	Refused  bool
	NotExist bool
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }
