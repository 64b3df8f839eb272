package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Detached commands in a pod (sandbox.DetachedConn). No process of
// agentkernel's stays in the pod or on this machine for them: one exec
// starts a small sh supervisor in the pod (in a session of its own, its
// stdio away from the exec's streams, so that it runs on when the exec
// ends), and the supervisor starts the command, waits for it and records
// how it ended. Everything about a command lives in the pod, under
// DetachedDir/ID/:
//
//	meta             {"command": [...], "started_at": ...}, written at start
//	sup              the supervisor's /proc/PID/stat line as it started
//	pid              the command's pid (it leads a session and process group of its own)
//	stdout, stderr   the streams, a 512-byte block past sandbox.DetachedLogCap at most
//	out, err         the FIFOs between the command and the two copies
//	status           "CODE UNIX-SECONDS" once it ended (128+N for signal N)
//	killed, timedout set before a kill, by DELETE or the timeout
//
// so a server started later (another process, another machine) reads
// the same records. Listing, logs and kills are further execs. The
// command and its arguments are never part of a script: they are the
// supervisor's arguments ("$@"). A record whose command has no status
// while its supervisor is gone (killed, or the container's processes
// ended) is failed, "supervisor gone". Stop copies the pod's records
// into the sandbox's record before it deletes the pod (keepDetached):
// after start, the commands of earlier pods are listed beside the new
// pod's, those that were running failed, "sandbox stopped", their
// output gone with the pod. The pod is the boundary: what
// the sandbox writes over these files changes only what is reported of
// its own commands, and every answer is parsed as hostile (bounded, its
// fields checked).

// DetachedDir is the directory of the detached commands' records in a
// sandbox's pod: under /tmp, writable in every profile (restrictive's
// read-only root has an emptyDir there), outside /workspace.
const DetachedDir = "/tmp/.agentkernel/detached"

// maxDetachedKept bounds the ended commands a pod keeps (with their
// output), as the agent's server does.
const maxDetachedKept = 64

// maxDetachedMeta bounds a command's record (its arguments): as the
// agent's 256 KiB request.
const maxDetachedMeta = 256 << 10

// detachedMeta is the record's meta file.
type detachedMeta struct {
	Command   []string  `json:"command"`
	StartedAt time.Time `json:"started_at"`
}

// detachedSupervisor runs in the pod: $1 the record's directory, $2 the
// log cap, $3 the timeout in seconds (0: none), $4 "setsid --" or "",
// then the command. Each stream goes through a FIFO to a cat that
// writes it as it comes into a file that the file size limit
// (ulimit -f, in 512-byte blocks) stops a block past the cap (the
// reader serves the cap and the marker), then a cat that drops the
// rest, so the command never blocks on a full pipe. (head -c would cap
// it exactly, but busybox's holds a command's first 4 KiB until it
// ends.)
const detachedSupervisor = `d=$1 cap=$2 to=$3 s=$4; shift 4
head -c 1024 "/proc/$$/stat" >"$d/sup"
n=$((cap/512+1))
{ ulimit -f "$n" 2>/dev/null; trap '' XFSZ 2>/dev/null; cat >"$d/stdout"; exec cat >/dev/null; } <"$d/out" &
{ ulimit -f "$n" 2>/dev/null; trap '' XFSZ 2>/dev/null; cat >"$d/stderr"; exec cat >/dev/null; } <"$d/err" &
$s "$@" </dev/null >"$d/out" 2>"$d/err" &
p=$!
echo "$p" >"$d/pid.tmp" && mv -f "$d/pid.tmp" "$d/pid"
w=
if [ "$to" -gt 0 ]; then
  $s sh -c 'sleep "$1" && : >"$2/timedout" && { kill -KILL "-$3" 2>/dev/null || kill -KILL "$3"; }' sh "$to" "$d" "$p" </dev/null >/dev/null 2>&1 &
  w=$!
fi
wait "$p"
c=$?
if [ -n "$w" ]; then kill -KILL "-$w" 2>/dev/null || kill -KILL "$w" 2>/dev/null; fi
echo "$c $(date +%s)" >"$d/status.tmp" && mv -f "$d/status.tmp" "$d/status"
wait`

// detachedStart runs in the pod: $1 DetachedDir, $2 the id, $3 the cap,
// $4 the timeout, $5 the meta record, $6 the command's name to look up
// first ("": no look-up), $7 the working directory it is looked up
// from, $8 the supervisor's script, then the command line. It prints
// the command's pid once the supervisor has started it; 127 and 126
// are a command that is not there or cannot run, 125 a start that
// failed.
const detachedStart = `b=$1 id=$2 cap=$3 to=$4 meta=$5 c0=$6 wd=$7 sup=$8; shift 8
if [ -n "$c0" ]; then
  (
    if [ -n "$wd" ]; then cd -- "$wd" 2>/dev/null || exit 0; fi
    case $c0 in
    */*) [ -e "$c0" ] || exit 127; [ -f "$c0" ] && [ -x "$c0" ] || exit 126 ;;
    *) command -v -- "$c0" >/dev/null 2>&1 || exit 127 ;;
    esac
  )
  case $? in
  127) echo "$c0: executable file not found" >&2; exit 127 ;;
  126) echo "$c0: permission denied" >&2; exit 126 ;;
  esac
fi
d=$b/$id
mkdir -p -- "$b" && chmod 700 -- "$b" 2>/dev/null
mkdir -- "$d" || exit 125
printf '%s' "$meta" >"$d/meta" && : >"$d/stdout" && : >"$d/stderr" && mkfifo "$d/out" "$d/err" || { rm -rf -- "$d"; exit 125; }
s=
if command -v setsid >/dev/null 2>&1; then s="setsid --"; fi
$s sh -c "$sup" sh "$d" "$cap" "$to" "$s" "$@" </dev/null >/dev/null 2>&1 &
i=0
while [ ! -s "$d/pid" ]; do
  i=$((i+1))
  if [ "$i" -gt 400 ]; then echo "the supervisor did not start the command" >&2; exit 125; fi
  sleep 0.025 2>/dev/null || sleep 1
done
cat "$d/pid"`

// detachedList runs in the pod: $1 DetachedDir, $2 one id or nothing.
// Each record is a block of lines, a letter and a value, every value
// read bounded and on one line; the supervisor's /proc entry (x) is read
// before the status (c), so that a supervisor found gone had written
// its status if it ever did.
const detachedList = `cd -- "$1" 2>/dev/null || exit 0
r() { if [ -f "$1" ]; then head -c "$2" -- "$1" 2>/dev/null | tr -d '\n'; fi; }
for id in ${2:-*}; do
  case $id in *[!0-9a-f]*) continue ;; esac
  [ "${#id}" -eq 16 ] && [ -d "$id" ] && [ ! -L "$id" ] || continue
  printf '@ %s\n' "$id"
  printf 'm %s\n' "$(r "$id/meta" 262144 | base64 | tr -d '\n')"
  printf 'p %s\n' "$(r "$id/pid" 32)"
  s=$(r "$id/sup" 1024)
  printf 's %s\n' "$s"
  sp=${s%% *}
  case $sp in ''|*[!0-9]*) sp= ;; esac
  if [ -n "$sp" ]; then printf 'x %s\n' "$(r "/proc/$sp/stat" 1024)"; fi
  printf 'c %s\n' "$(r "$id/status" 64)"
  if [ -e "$id/killed" ]; then echo k; fi
  if [ -e "$id/timedout" ]; then echo t; fi
  printf 'o %s\n' "$(stat -c %s -- "$id/stdout" 2>/dev/null)"
  printf 'e %s\n' "$(stat -c %s -- "$id/stderr" 2>/dev/null)"
done`

// detachedLogs runs in the pod: $1 the record's directory, $2 the
// stream, $3 the offset, $4 the cap. It prints the stream's size on a
// line, then its bytes from the offset up to the cap.
const detachedLogs = `[ -d "$1" ] && [ -f "$1/meta" ] || exit 3
f=$1/$2
n=0
if [ -f "$f" ]; then n=$(stat -c %s -- "$f") || exit 1; fi
echo "$n"
l=$n
if [ "$n" -gt "$4" ]; then l=$4; fi
if [ "$3" -lt "$l" ]; then tail -c "+$(($3+1))" -- "$f" | head -c "$((l-$3))"; fi
exit 0`

// detachedKill runs in the pod: $1 the record's directory, $2 the
// command's pid. It marks the record killed, kills the command's
// process group (the command alone where it has none) and waits up to
// 10 s for the supervisor's status.
const detachedKill = `d=$1 p=$2
[ -e "$d/status" ] && exit 0
: >"$d/killed"
kill -KILL "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null
i=0
while [ ! -e "$d/status" ]; do
  i=$((i+1))
  if [ "$i" -gt 400 ]; then echo "the command did not end within 10 s of SIGKILL" >&2; exit 4; fi
  sleep 0.025 2>/dev/null || sleep 1
done`

var _ sandbox.DetachedConn = (*conn)(nil)

func newDetachedID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// ExecDetached starts req in the pod (sandbox.DetachedConn): refused
// with sandbox.ErrDetachedLimit while sandbox.MaxDetachedRunning run
// (counted one start at a time per sandbox in this process; servers
// that share a cluster count apart).
func (c *conn) ExecDetached(ctx context.Context, req sandbox.ExecRequest) (sandbox.DetachedCommand, error) {
	if len(req.Args) == 0 || req.TTY {
		return sandbox.DetachedCommand{}, errors.New("a detached command needs a command and no terminal")
	}
	if req.User != "" {
		return sandbox.DetachedCommand{}, fmt.Errorf("exec as user %q: %w on the kubernetes backend (commands run as the pod's user)", req.User, sandbox.ErrUnsupported)
	}
	args, err := execArgs(req)
	if err != nil {
		return sandbox.DetachedCommand{}, err
	}
	if c.s != nil {
		defer c.s.detaching.lock(c.name)()
	}
	all, err := c.detached(ctx, "")
	if err != nil {
		return sandbox.DetachedCommand{}, err
	}
	running := 0
	var ended []sandbox.DetachedCommand
	for _, d := range all {
		if d.Status == sandbox.DetachedRunning {
			running++
		} else {
			ended = append(ended, d)
		}
	}
	if running >= sandbox.MaxDetachedRunning {
		return sandbox.DetachedCommand{}, fmt.Errorf("this sandbox already runs %d detached commands, the most it may; wait for one to end or kill one (agentkernel exec NAME --kill ID): %w",
			sandbox.MaxDetachedRunning, sandbox.ErrDetachedLimit)
	}
	// The oldest ended ones go, with their output, past
	// maxDetachedKept (this start's own record makes room for itself
	// when it ends).
	if len(ended) > maxDetachedKept-1 {
		var gone []string
		for _, d := range ended[:len(ended)-(maxDetachedKept-1)] {
			gone = append(gone, DetachedDir+"/"+d.ID)
		}
		if code, stderr, err := c.script(ctx, `rm -rf -- "$@"`, nil, nil, gone...); err != nil || code != 0 {
			return sandbox.DetachedCommand{}, fmt.Errorf("removing the oldest ended detached commands: exit %d %s %v", code, stderr, err)
		}
	}
	id, err := newDetachedID()
	if err != nil {
		return sandbox.DetachedCommand{}, err
	}
	start := time.Now().UTC()
	meta, err := json.Marshal(detachedMeta{Command: req.Args, StartedAt: start})
	if err != nil {
		return sandbox.DetachedCommand{}, err
	}
	if len(meta) > maxDetachedMeta {
		return sandbox.DetachedCommand{}, fmt.Errorf("exec %s: the arguments are over the %d KiB a detached command's record holds: %w",
			req.Args[0], maxDetachedMeta>>10, sandbox.ErrCannotInvoke)
	}
	// The command is looked up first, so that one that is not there is
	// the start's error (127), as elsewhere, not a failed record. Not
	// when the request sets PATH: env(1) looks it up in that.
	c0 := req.Args[0]
	for _, e := range req.Env {
		if strings.HasPrefix(e, "PATH=") {
			c0 = ""
		}
	}
	timeout := int64(0)
	if req.Timeout > 0 {
		timeout = int64((req.Timeout + time.Second - 1) / time.Second)
	}
	var out bytes.Buffer
	sargs := append([]string{DetachedDir, id, strconv.Itoa(sandbox.DetachedLogCap), strconv.FormatInt(timeout, 10), string(meta), c0, req.Workdir, detachedSupervisor}, args...)
	code, stderr, err := c.script(ctx, detachedStart, nil, &cappedWriter{w: &out, max: 64}, sargs...)
	if err != nil {
		return sandbox.DetachedCommand{}, err
	}
	switch code {
	case 0:
	case 127:
		return sandbox.DetachedCommand{}, fmt.Errorf("exec %s: %s: %w", req.Args[0], stderr, sandbox.ErrNotFound)
	case 126:
		return sandbox.DetachedCommand{}, fmt.Errorf("exec %s: %s: %w", req.Args[0], stderr, sandbox.ErrCannotInvoke)
	default:
		return sandbox.DetachedCommand{}, fmt.Errorf("starting a detached command in sandbox %q: exit %d: %s", c.name, code, stderr)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil || pid < 2 {
		return sandbox.DetachedCommand{}, fmt.Errorf("starting a detached command in sandbox %q: its pid came back as %q", c.name, out.String())
	}
	return sandbox.DetachedCommand{ID: id, Command: append([]string(nil), req.Args...), Pid: pid, Status: sandbox.DetachedRunning, StartedAt: start}, nil
}

// cappedWriter passes max bytes on and fails past them.
type cappedWriter struct {
	w   io.Writer
	max int64
	n   int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.max {
		return 0, errors.New("output over its limit")
	}
	c.n += int64(len(p))
	return c.w.Write(p)
}

// maxDetachedListing bounds a listing's answer: 128 records of the
// largest meta, with room.
const maxDetachedListing = 48 << 20

// detached reads the records: every one (id "") or id's.
func (c *conn) detached(ctx context.Context, id string) ([]sandbox.DetachedCommand, error) {
	args := []string{DetachedDir}
	if id != "" {
		if err := sandbox.ValidDetachedID(id); err != nil {
			return nil, err
		}
		args = append(args, id)
	}
	out := &cappedBuffer{max: maxDetachedListing}
	code, stderr, err := c.script(ctx, detachedList, nil, out, args...)
	if out.over {
		return nil, fmt.Errorf("listing detached commands in sandbox %q: more than %d bytes", c.name, maxDetachedListing)
	}
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("listing detached commands in sandbox %q: exit %d: %s", c.name, code, stderr)
	}
	return parseDetached(out.b.String(), time.Now()), nil
}

// rawDetached is one record as the listing printed it.
type rawDetached struct {
	id, meta, pid, sup, proc, status string
	hasProc, killed, timedOut        bool
	stdout, stderr                   string
}

// parseDetached reads detachedList's answer; now dates a record that
// never got its supervisor.
func parseDetached(s string, now time.Time) []sandbox.DetachedCommand {
	var raws []*rawDetached
	var cur *rawDetached
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(line, " ")
		if k == "@" {
			cur = &rawDetached{id: v}
			raws = append(raws, cur)
			continue
		}
		if cur == nil {
			continue
		}
		switch k {
		case "m":
			cur.meta = v
		case "p":
			cur.pid = v
		case "s":
			cur.sup = v
		case "x":
			cur.proc, cur.hasProc = v, true
		case "c":
			cur.status = v
		case "k":
			cur.killed = true
		case "t":
			cur.timedOut = true
		case "o":
			cur.stdout = v
		case "e":
			cur.stderr = v
		}
	}
	var out []sandbox.DetachedCommand
	for _, r := range raws {
		if d, ok := r.command(now); ok {
			out = append(out, d)
		}
	}
	sortDetached(out)
	return out
}

// sortDetached sorts ds oldest first.
func sortDetached(ds []sandbox.DetachedCommand) {
	sort.Slice(ds, func(i, j int) bool {
		if !ds[i].StartedAt.Equal(ds[j].StartedAt) {
			return ds[i].StartedAt.Before(ds[j].StartedAt)
		}
		return ds[i].ID < ds[j].ID
	})
}

// podDetached are the detached commands of name's running pod, as Stop
// keeps them before it deletes the pod: those still running are failed,
// "sandbox stopped" (the pod's end ends them), and the output of every
// one goes with the pod (its sizes 0 here). Best effort and bounded: a
// pod that does not answer within 15 s leaves none.
func (s *Sandboxes) podDetached(ctx context.Context, name string) []sandbox.DetachedCommand {
	sb, err := s.b.Get(ctx, name)
	if err != nil || sb.Phase != corev1.PodRunning || sb.Removing {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	ds, err := (&conn{b: s.b, name: name}).detached(lctx, "")
	if err != nil {
		return nil
	}
	now := time.Now().UTC()
	for i := range ds {
		d := &ds[i]
		if d.Status == sandbox.DetachedRunning {
			d.Status, d.Reason, d.FinishedAt = sandbox.DetachedFailed, "sandbox stopped", &now
		}
		d.StdoutBytes, d.StderrBytes = 0, 0
	}
	return ds
}

// keepDetached adds ds, the commands of the pod Stop deleted, to r's;
// the newest maxDetachedKept are kept.
func keepDetached(r *record, ds []sandbox.DetachedCommand) {
	if len(ds) == 0 {
		return
	}
	all := mergeDetached(r.Detached, ds)
	if len(all) > maxDetachedKept {
		all = all[len(all)-maxDetachedKept:]
	}
	r.Detached = all
}

// mergeDetached is older and newer together, oldest first; an id in
// both is newer's.
func mergeDetached(older, newer []sandbox.DetachedCommand) []sandbox.DetachedCommand {
	seen := map[string]bool{}
	for _, d := range newer {
		seen[d.ID] = true
	}
	var out []sandbox.DetachedCommand
	for _, d := range older {
		if !seen[d.ID] {
			out = append(out, d)
		}
	}
	out = append(out, newer...)
	sortDetached(out)
	return out
}

// kept are the detached commands of the sandbox's earlier pods (all, or
// id's), as its record holds them.
func (c *conn) kept(ctx context.Context, id string) []sandbox.DetachedCommand {
	if c.s == nil {
		return nil
	}
	r, _, err := c.s.load(ctx, c.name)
	if err != nil {
		return nil
	}
	if id == "" {
		return r.Detached
	}
	for _, d := range r.Detached {
		if d.ID == id {
			return []sandbox.DetachedCommand{d}
		}
	}
	return nil
}

// logSize is a stream's size as the logs route serves it: the file's,
// past the cap the cap and the marker.
func logSize(file int64) int64 {
	if file > sandbox.DetachedLogCap {
		return sandbox.DetachedLogCap + int64(len(sandbox.DetachedLogMarker))
	}
	return file
}

// procStat is what a /proc/PID/stat line says of its process: pid,
// state and start time (in clock ticks after boot).
type procStat struct {
	pid   int
	state string
	start string
}

func parseProcStat(line string) (procStat, bool) {
	pid, rest, ok := strings.Cut(line, " ")
	i := strings.LastIndexByte(rest, ')')
	if !ok || i < 0 {
		return procStat{}, false
	}
	n, err := strconv.Atoi(pid)
	f := strings.Fields(rest[i+1:])
	// After the name: state (field 3), ..., starttime (field 22).
	if err != nil || len(f) < 20 {
		return procStat{}, false
	}
	return procStat{pid: n, state: f[0], start: f[19]}, true
}

// supervisorGone is how long a record may have no supervisor before it
// counts as a start that failed.
const supervisorGone = time.Minute

// command makes the record a DetachedCommand; false for one that is no
// record (a malformed id or meta).
func (r *rawDetached) command(now time.Time) (sandbox.DetachedCommand, bool) {
	if sandbox.ValidDetachedID(r.id) != nil {
		return sandbox.DetachedCommand{}, false
	}
	mb, err := base64.StdEncoding.DecodeString(r.meta)
	var m detachedMeta
	if err != nil || json.Unmarshal(mb, &m) != nil || m.StartedAt.IsZero() {
		return sandbox.DetachedCommand{}, false
	}
	d := sandbox.DetachedCommand{ID: r.id, Command: m.Command, StartedAt: m.StartedAt.UTC(), Status: sandbox.DetachedRunning}
	if d.Command == nil {
		d.Command = []string{}
	}
	if p, err := strconv.Atoi(r.pid); err == nil && p > 1 {
		d.Pid = p
	}
	if n, err := strconv.ParseInt(r.stdout, 10, 64); err == nil && n >= 0 {
		d.StdoutBytes = logSize(n)
	}
	if n, err := strconv.ParseInt(r.stderr, 10, 64); err == nil && n >= 0 {
		d.StderrBytes = logSize(n)
	}
	if f := strings.Fields(r.status); len(f) == 2 {
		code, err1 := strconv.Atoi(f[0])
		sec, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 == nil && err2 == nil && code >= 0 && code < 256 {
			end := time.Unix(sec, 0).UTC()
			if end.Before(d.StartedAt) {
				// The pod's clock says seconds; the start has more.
				end = d.StartedAt
			}
			d.ExitCode, d.FinishedAt = &code, &end
			d.Status = sandbox.DetachedCompleted
			if code != 0 {
				d.Status = sandbox.DetachedFailed
				switch {
				case r.timedOut:
					d.Reason = "timed out"
				case r.killed:
					d.Reason = "killed"
				}
			}
			return d, true
		}
	}
	// No status: running while its supervisor is the process that
	// recorded itself (same pid, same start, not a zombie).
	sup, supOK := parseProcStat(r.sup)
	if !supOK {
		if r.sup == "" && now.Sub(d.StartedAt) < supervisorGone {
			return d, true // starting
		}
	} else if cur, ok := parseProcStat(r.proc); r.hasProc && ok && cur.pid == sup.pid && cur.start == sup.start && cur.state != "Z" && cur.state != "X" {
		return d, true
	}
	d.Status, d.Reason = sandbox.DetachedFailed, "supervisor gone"
	return d, true
}

// Detached lists the pod's detached commands (id "") or describes one
// (sandbox.ErrDetachedNotFound).
func (c *conn) Detached(ctx context.Context, id string) ([]sandbox.DetachedCommand, error) {
	ds, err := c.detached(ctx, id)
	if err != nil {
		return nil, err
	}
	if id == "" {
		ds = mergeDetached(c.kept(ctx, ""), ds)
	} else if len(ds) == 0 {
		ds = c.kept(ctx, id)
	}
	if id != "" && len(ds) != 1 {
		return nil, fmt.Errorf("%s: %w", id, sandbox.ErrDetachedNotFound)
	}
	return ds, nil
}

// DetachedLogs copies stream of command id from offset to w: what the
// file holds up to the cap, then the marker when it went past.
func (c *conn) DetachedLogs(ctx context.Context, id, stream string, offset int64, w io.Writer) (int64, error) {
	if err := sandbox.ValidDetachedID(id); err != nil {
		return 0, err
	}
	if stream != "stdout" && stream != "stderr" {
		return 0, fmt.Errorf("stream %q: use stdout or stderr", stream)
	}
	if offset < 0 {
		return 0, fmt.Errorf("offset %d: %w", offset, sandbox.ErrLogOffset)
	}
	lw := &logWriter{w: w, offset: offset, stream: stream}
	code, stderr, err := c.script(ctx, detachedLogs, nil, lw, DetachedDir+"/"+id, stream, strconv.FormatInt(offset, 10), strconv.Itoa(sandbox.DetachedLogCap))
	if lw.err != nil {
		return lw.n, lw.err
	}
	if err != nil {
		return lw.n, err
	}
	switch {
	case code == exitMissing && len(c.kept(ctx, id)) == 1:
		// A command of an earlier pod: its output went with the pod.
		if offset > 0 {
			return 0, fmt.Errorf("offset %d is past the end of %s (0 bytes: the output went with the sandbox's earlier pod): %w", offset, stream, sandbox.ErrLogOffset)
		}
		return 0, nil
	case code == exitMissing:
		return 0, fmt.Errorf("%s: %w", id, sandbox.ErrDetachedNotFound)
	case code != 0:
		return lw.n, fmt.Errorf("reading %s of detached command %s: exit %d: %s", stream, id, code, stderr)
	case !lw.sized:
		return lw.n, fmt.Errorf("reading %s of detached command %s: no size came back", stream, id)
	}
	if want := min(lw.size, sandbox.DetachedLogCap) - offset; want > 0 && lw.n != want {
		return lw.n, fmt.Errorf("reading %s of detached command %s: %d bytes arrived of %d", stream, id, lw.n, want)
	}
	if lw.size > sandbox.DetachedLogCap {
		from := max(offset-sandbox.DetachedLogCap, 0)
		k, err := io.WriteString(w, sandbox.DetachedLogMarker[from:])
		lw.n += int64(k)
		if err != nil {
			return lw.n, err
		}
	}
	return lw.n, nil
}

// logWriter reads detachedLogs' answer: the size line first (an offset
// past the stream's end is sandbox.ErrLogOffset, and nothing is
// written), then at most the bytes the size leaves after the offset.
type logWriter struct {
	w      io.Writer
	offset int64
	stream string
	head   []byte
	sized  bool
	size   int64
	n      int64
	err    error
}

func (l *logWriter) Write(p []byte) (int, error) {
	if errors.Is(l.err, sandbox.ErrLogOffset) {
		return len(p), nil // the script sends nothing more
	}
	if l.err != nil {
		return 0, l.err
	}
	all := len(p)
	if !l.sized {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.head = append(l.head, p...)
			if len(l.head) > 32 {
				l.err = errors.New("the log's size line is too long")
				return 0, l.err
			}
			return all, nil
		}
		l.head = append(l.head, p[:i]...)
		p = p[i+1:]
		n, err := strconv.ParseInt(strings.TrimSpace(string(l.head)), 10, 64)
		if err != nil || n < 0 {
			l.err = fmt.Errorf("the log's size came back as %q", l.head)
			return 0, l.err
		}
		l.sized, l.size = true, n
		if total := logSize(n); l.offset > total {
			l.err = fmt.Errorf("offset %d is past the end of %s (%d bytes): %w", l.offset, l.stream, total, sandbox.ErrLogOffset)
			return all, nil
		}
	}
	if len(p) == 0 {
		return all, nil
	}
	if l.n+int64(len(p)) > min(l.size, sandbox.DetachedLogCap)-l.offset {
		l.err = errors.New("more of the log arrived than its size")
		return 0, l.err
	}
	k, err := l.w.Write(p)
	l.n += int64(k)
	if err != nil {
		l.err = err
		return 0, err
	}
	return all, nil
}

// KillDetached kills command id's process group (SIGKILL) and returns it
// once it has ended; one that has ended is returned as it is.
func (c *conn) KillDetached(ctx context.Context, id string) (sandbox.DetachedCommand, error) {
	ds, err := c.Detached(ctx, id)
	if err != nil {
		return sandbox.DetachedCommand{}, err
	}
	d := ds[0]
	if d.Status != sandbox.DetachedRunning {
		return d, nil
	}
	if d.Pid < 2 {
		return d, fmt.Errorf("detached command %s: no pid recorded yet: try again", id)
	}
	code, stderr, err := c.script(ctx, detachedKill, nil, nil, DetachedDir+"/"+id, strconv.Itoa(d.Pid))
	if err != nil {
		return d, err
	}
	if code != 0 {
		return d, fmt.Errorf("killing detached command %s: exit %d: %s", id, code, stderr)
	}
	ds, err = c.Detached(ctx, id)
	if err != nil {
		return d, err
	}
	return ds[0], nil
}
