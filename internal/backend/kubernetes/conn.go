package kubernetes

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// maxFile is the largest file ReadFile and WriteFile move through the
// exec API (its bytes are held in memory, base64 on the way in).
const maxFile = 64 << 20

// exitMissing is the status the file scripts below exit with when their
// path does not exist.
const exitMissing = 3

// conn is a sandbox.Conn to a running sandbox's pod: every command and
// file operation is one exec through the cluster's API, paths handed to
// sh as arguments, never spliced into its script. The pod is the
// boundary: what a hostile sandbox makes of a path (a symbolic link out
// of it, an archive that climbs) stays inside its container.
type conn struct {
	b    *Backend
	name string
	// s, where set, holds the detached commands of the sandbox's
	// earlier pods.
	s *Sandboxes

	mu sync.Mutex
	// pod is the sandbox's pod as last seen Running, at seen (Connect
	// saw it): commands within podFresh of that go to it without
	// another look-up, later ones look again.
	pod  *Sandbox
	seen time.Time
}

// podFresh is how long a connection trusts the pod it last saw
// Running: a command within it goes straight to that pod (by name: a
// pod gone since fails the command), one after it lists the sandbox's
// pods again first. The look-up is an API round trip before every
// command; the connection a command is run through was opened (and the
// pod seen) a moment before.
const podFresh = time.Second

// exec runs args in the sandbox's pod.
func (c *conn) exec(ctx context.Context, args []string, stdio ExecIO) (int, error) {
	c.mu.Lock()
	pod := c.pod
	if pod != nil && time.Since(c.seen) > podFresh {
		pod = nil
	}
	c.mu.Unlock()
	if pod == nil {
		seen := time.Now()
		sb, err := c.b.Get(ctx, c.name)
		if err != nil {
			return 0, err
		}
		c.mu.Lock()
		c.pod, c.seen, pod = sb, seen, sb
		c.mu.Unlock()
	}
	return c.b.ExecIn(ctx, pod, args, stdio)
}

func (c *conn) Close() error { return nil }

// envName is a variable name env(1) takes as an assignment.
func envName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if r != '_' && !(r >= 'A' && r <= 'Z') && !(r >= 'a' && r <= 'z') && (i == 0 || !(r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

// execArgs is req's command line in the pod: the exec API has no
// environment or working directory of its own, so a request with either
// runs through sh (cd) and env(1).
func execArgs(req sandbox.ExecRequest) ([]string, error) {
	args := req.Args
	if len(req.Env) > 0 {
		if strings.Contains(args[0], "=") {
			return nil, fmt.Errorf("command %q: a command name with '=' cannot be run with an environment", args[0])
		}
		for _, e := range req.Env {
			k, _, ok := strings.Cut(e, "=")
			if !ok || !envName(k) {
				return nil, fmt.Errorf("environment entry %q is not NAME=VALUE", e)
			}
		}
		args = append(append([]string{"env"}, req.Env...), args...)
	}
	if req.Workdir != "" {
		if !strings.HasPrefix(req.Workdir, "/") || strings.ContainsRune(req.Workdir, 0) {
			return nil, fmt.Errorf("working directory %q: give an absolute path inside the sandbox", req.Workdir)
		}
		args = append([]string{"sh", "-c", `cd -- "$0" || exit 126; exec "$@"`, req.Workdir}, args...)
	}
	return args, nil
}

// Exec runs req in the pod. Signals cannot reach a command through the
// exec API: signals is not read; the command ends with its stream.
func (c *conn) Exec(ctx context.Context, req sandbox.ExecRequest, stdio sandbox.Stdio, _ <-chan os.Signal) (sandbox.Result, error) {
	if len(req.Args) == 0 {
		return sandbox.Result{}, errors.New("no command given")
	}
	if req.User != "" {
		return sandbox.Result{}, fmt.Errorf("exec as user %q: %w on the kubernetes backend (commands run as the pod's user)", req.User, sandbox.ErrUnsupported)
	}
	args, err := execArgs(req)
	if err != nil {
		return sandbox.Result{}, err
	}
	ectx := ctx
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	code, err := c.exec(ectx, args, ExecIO{Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stderr, TTY: req.TTY})
	if err != nil {
		if req.Timeout > 0 && errors.Is(ectx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return sandbox.Result{ExitCode: 124, TimedOut: true}, nil
		}
		return sandbox.Result{}, execError(err)
	}
	return resultOf(code), nil
}

// script runs sh -c script with args ($1...) and returns its status and
// stderr.
func (c *conn) script(ctx context.Context, script string, stdin io.Reader, stdout io.Writer, args ...string) (int, string, error) {
	var stderr bytes.Buffer
	code, err := c.exec(ctx, append([]string{"sh", "-c", script, "sh"}, args...), ExecIO{Stdin: stdin, Stdout: stdout, Stderr: &stderr})
	return code, strings.TrimSpace(stderr.String()), err
}

// pathErr is the error of a file script that ended with code.
func pathErr(p string, code int, stderr string) error {
	if code == exitMissing {
		return &sandbox.PathError{Path: p, Err: errors.New("no such file or directory in the sandbox"), NotExist: true}
	}
	if stderr == "" {
		stderr = "exit status " + strconv.Itoa(code)
	}
	return &sandbox.PathError{Path: p, Err: errors.New(stderr)}
}

// cleanPath is p made absolute and clean.
func cleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", &sandbox.PathError{Path: p, Err: errors.New("give an absolute path inside the sandbox"), Refused: true}
	}
	return path.Clean(p), nil
}

func (c *conn) ReadFile(ctx context.Context, p string, w io.Writer) (int64, error) {
	p, err := cleanPath(p)
	if err != nil {
		return 0, err
	}
	// Only a regular file, and only up to maxFile: what the sandbox
	// serves is hostile (a device that never ends, a file that grows);
	// the output is capped here too, whatever the script says.
	const script = `[ -e "$1" ] || exit 3; [ -f "$1" ] || { echo "not a regular file" >&2; exit 1; }; n=$(wc -c < "$1") && [ "$n" -le "$2" ] || { echo "$n bytes, more than $2" >&2; exit 1; }; echo "$n" && exec head -c "$2" -- "$1"`
	out := &cappedBuffer{max: maxFile + 32}
	code, stderr, err := c.script(ctx, script, nil, out, p, strconv.Itoa(maxFile))
	if out.over {
		return 0, &sandbox.PathError{Path: p, Err: fmt.Errorf("more than %d bytes", maxFile)}
	}
	if err != nil {
		return 0, err
	}
	if code != 0 {
		return 0, pathErr(p, code, stderr)
	}
	size, data, _ := bytes.Cut(out.b.Bytes(), []byte("\n"))
	n, err := strconv.Atoi(strings.TrimSpace(string(size)))
	if err != nil || n != len(data) {
		return 0, &sandbox.PathError{Path: p, Err: fmt.Errorf("%d bytes arrived of %s", len(data), strings.TrimSpace(string(size)))}
	}
	m, err := w.Write(data)
	return int64(m), err
}

func (c *conn) WriteFile(ctx context.Context, p string, r io.Reader, mode os.FileMode) (int64, error) {
	p, err := cleanPath(p)
	if err != nil {
		return 0, err
	}
	data, err := io.ReadAll(io.LimitReader(r, maxFile+1))
	if err != nil {
		return 0, err
	}
	if len(data) > maxFile {
		return 0, &sandbox.PathError{Path: p, Err: fmt.Errorf("more than %d bytes: too large to write through the exec API", maxFile)}
	}
	enc := base64.StdEncoding.EncodeToString(data)
	// The command reads exactly the encoded length, with stdin held open
	// until it is done (a runtime may drop the last bytes of a stdin
	// that closes early), and checks the file's size after.
	const script = `mkdir -p -- "$(dirname -- "$1")" && head -c "$2" | base64 -d > "$1" && chmod "$4" "$1" && n=$(wc -c < "$1") && [ "$n" -eq "$3" ] || { echo "short write: $n of $3 bytes" >&2; exit 1; }`
	done := make(chan struct{})
	in := io.MultiReader(strings.NewReader(enc), holdOpen(done))
	code, stderr, err := c.script(ctx, script, in, nil, p, strconv.Itoa(len(enc)), strconv.Itoa(len(data)), strconv.FormatUint(uint64(mode.Perm()), 8))
	close(done)
	if err != nil {
		return 0, err
	}
	if code != 0 {
		return 0, pathErr(p, code, stderr)
	}
	return int64(len(data)), nil
}

func (c *conn) Delete(ctx context.Context, p string, recursive bool) error {
	p, err := cleanPath(p)
	if err != nil {
		return err
	}
	if p == "/" {
		return &sandbox.PathError{Path: p, Err: errors.New("the sandbox's root cannot be deleted"), Refused: true}
	}
	const script = `[ -e "$1" ] || [ -L "$1" ] || exit 3; if [ "$2" = r ]; then exec rm -rf -- "$1"; elif [ -d "$1" ] && [ ! -L "$1" ]; then exec rmdir -- "$1"; else exec rm -f -- "$1"; fi`
	flag := "-"
	if recursive {
		flag = "r"
	}
	code, stderr, err := c.script(ctx, script, nil, nil, p, flag)
	if err != nil {
		return err
	}
	if code != 0 {
		return pathErr(p, code, stderr)
	}
	return nil
}

// statFormat is stat(1)'s line for one file: size, raw mode in hex,
// modification time, then the name (last: it may hold spaces).
const statFormat = "%s %f %Y %n"

func parseStat(line string) (sandbox.FileInfo, error) {
	f := strings.SplitN(line, " ", 4)
	if len(f) != 4 {
		return sandbox.FileInfo{}, fmt.Errorf("stat printed %q", line)
	}
	size, err1 := strconv.ParseInt(f[0], 10, 64)
	raw, err2 := strconv.ParseUint(f[1], 16, 32)
	mt, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return sandbox.FileInfo{}, fmt.Errorf("stat printed %q: %w", line, err)
	}
	mode := os.FileMode(raw & 0o777)
	switch raw & 0o170000 {
	case 0o040000:
		mode |= os.ModeDir
	case 0o120000:
		mode |= os.ModeSymlink
	case 0o010000:
		mode |= os.ModeNamedPipe
	case 0o140000:
		mode |= os.ModeSocket
	case 0o020000:
		mode |= os.ModeDevice | os.ModeCharDevice
	case 0o060000:
		mode |= os.ModeDevice
	}
	return sandbox.FileInfo{Name: path.Base(f[3]), Size: size, Mode: mode, ModTime: time.Unix(mt, 0).UTC()}, nil
}

func (c *conn) Stat(ctx context.Context, p string) (sandbox.FileInfo, error) {
	p, err := cleanPath(p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	var out bytes.Buffer
	code, stderr, err := c.script(ctx, `[ -e "$1" ] || [ -L "$1" ] || exit 3; exec stat -c "$2" -- "$1"`, nil, &out, p, statFormat)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if code != 0 {
		return sandbox.FileInfo{}, pathErr(p, code, stderr)
	}
	return parseStat(strings.TrimSuffix(out.String(), "\n"))
}

func (c *conn) List(ctx context.Context, p string) ([]sandbox.FileInfo, error) {
	p, err := cleanPath(p)
	if err != nil {
		return nil, err
	}
	const script = `[ -e "$1" ] || exit 3; cd -- "$1" || exit 1; for f in * .[!.]* ..?*; do [ -e "$f" ] || [ -L "$f" ] || continue; stat -c "$2" -- "$f"; done`
	var out bytes.Buffer
	code, stderr, err := c.script(ctx, script, nil, &out, p, statFormat)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, pathErr(p, code, stderr)
	}
	var list []sandbox.FileInfo
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if l == "" {
			continue
		}
		fi, err := parseStat(l)
		if err != nil {
			return nil, err
		}
		list = append(list, fi)
	}
	return list, nil
}

func (c *conn) TarOut(ctx context.Context, p string, w io.Writer) error {
	p, err := cleanPath(p)
	if err != nil {
		return err
	}
	const script = `[ -e "$1" ] || [ -L "$1" ] || exit 3; cd -- "$(dirname -- "$1")" && exec tar -cf - -- "$(basename -- "$1")"`
	code, stderr, err := c.script(ctx, script, nil, w, p)
	if err != nil {
		return err
	}
	if code != 0 {
		return pathErr(p, code, stderr)
	}
	return nil
}

func (c *conn) TarIn(ctx context.Context, p string, r io.Reader) error {
	p, err := cleanPath(p)
	if err != nil {
		return err
	}
	code, stderr, err := c.script(ctx, `mkdir -p -- "$1" && cd -- "$1" && exec tar -xf -`, r, nil, p)
	if err != nil {
		return err
	}
	if code != 0 {
		return pathErr(p, code, stderr)
	}
	return nil
}

// Usage has no figures: the pod's use is its node's kubelet's to tell
// (the metrics API, where the cluster has one).
func (c *conn) Usage(context.Context) (sandbox.Usage, error) {
	return sandbox.Usage{Name: c.name, Status: sandbox.StatusRunning}, nil
}
