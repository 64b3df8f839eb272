package kubernetes

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// ExecIO are an exec's streams; nil ones are not attached.
type ExecIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
}

// Exec runs args in the named sandbox's container through the API's exec
// subresource (the kubelet runs it) and returns its exit status. The
// arguments go to the container as they are: no shell reads them. It
// looks the sandbox's pod up first (one list); a caller that has just
// seen the pod runs ExecIn.
func (b *Backend) Exec(ctx context.Context, name string, args []string, stdio ExecIO) (int, error) {
	if len(args) == 0 {
		return 0, fmt.Errorf("exec: a command is required")
	}
	s, err := b.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	return b.ExecIn(ctx, s, args, stdio)
}

// ExecIn is Exec in the pod s names, as the caller saw it a moment ago
// (Get, WaitRunning, CreateFromPool), without looking it up again: s
// must be Running and not being removed. The exec goes to that pod by
// its name; one gone since fails it (ErrNotFound).
func (b *Backend) ExecIn(ctx context.Context, s *Sandbox, args []string, stdio ExecIO) (int, error) {
	if len(args) == 0 {
		return 0, fmt.Errorf("exec: a command is required")
	}
	if s.Removing {
		return 0, fmt.Errorf("sandbox %q is being removed: exec refused", s.Name)
	}
	if s.Phase != corev1.PodRunning {
		return 0, fmt.Errorf("sandbox %q is %s, not Running: exec needs a running pod", s.Name, s.Phase)
	}
	if s.Pod == "" {
		return 0, fmt.Errorf("sandbox %q: no pod to run in", s.Name)
	}
	req := b.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(b.ns).Name(s.Pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: "sandbox",
			Command:   args,
			Stdin:     stdio.Stdin != nil,
			Stdout:    stdio.Stdout != nil,
			Stderr:    stdio.Stderr != nil && !stdio.TTY,
			TTY:       stdio.TTY,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(b.cfg, "GET", req.URL().String())
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.cfg, "POST", req.URL())
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	// SPDY only when the WebSocket upgrade itself failed (an older API
	// server, a proxy): any later error, a command's non-zero exit among
	// them, means the command ran, and falling back would run it again.
	exe, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stderr, Tty: stdio.TTY})
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code, nil
	}
	if err != nil {
		// The error of an upgrade the API server refused hides its
		// status: a pod gone since s was seen is told by asking.
		if ctx.Err() == nil {
			if _, gerr := b.client.CoreV1().Pods(b.ns).Get(ctx, s.Pod, metav1.GetOptions{}); apierrors.IsNotFound(gerr) {
				return 0, fmt.Errorf("sandbox %q: its pod %s is gone (stopped or removed meanwhile; start it again): %w", s.Name, s.Pod, ErrNotFound)
			}
		}
		return 0, b.apiError("exec", err)
	}
	return 0, nil
}

// WriteFile writes data to path in the sandbox: base64 on the stdin of
// `base64 -d` inside, the path handed to sh as $1, never spliced into
// the script. The command reads exactly the encoded length and checks
// the file's size after: stdin is held open until the command is done,
// because a runtime may drop the last bytes of stdin that arrive just
// before it closes (containerd 1.6 does), and a short file is an error,
// never a silent truncation.
func (b *Backend) WriteFile(ctx context.Context, name, path string, data []byte) error {
	if err := checkSandboxPath(path); err != nil {
		return err
	}
	enc := base64.StdEncoding.EncodeToString(data)
	var stderr bytes.Buffer
	done := make(chan struct{})
	in := io.MultiReader(strings.NewReader(enc), holdOpen(done))
	const script = `head -c "$2" | base64 -d > "$1" && n=$(wc -c < "$1") && [ "$n" -eq "$3" ] || { echo "short write: $n of $3 bytes" >&2; exit 1; }`
	code, err := b.Exec(ctx, name, []string{"sh", "-c", script, "sh", path, strconv.Itoa(len(enc)), strconv.Itoa(len(data))}, ExecIO{Stdin: in, Stderr: &stderr})
	close(done)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("write %s in sandbox %q: exit %d: %s", path, name, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// holdOpen is a reader that gives nothing until done is closed, then
// EOF.
type holdOpen chan struct{}

func (h holdOpen) Read([]byte) (int, error) {
	<-h
	return 0, io.EOF
}

// ReadFile reads path in the sandbox: its size, then its bytes
// (`wc -c`, then `cat`), and fails when fewer arrive than the size said.
func (b *Backend) ReadFile(ctx context.Context, name, path string, limit int64) ([]byte, error) {
	if err := checkSandboxPath(path); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("read %s: a positive size limit is required", path)
	}
	// Only a regular file, and only up to limit: what the sandbox serves
	// is hostile (a device that never ends, a file that grows), and the
	// output is capped here too, whatever the script says.
	const script = `[ -f "$1" ] || { echo "not a regular file" >&2; exit 1; }; n=$(wc -c < "$1") && [ "$n" -le "$2" ] || { echo "$n bytes, more than $2" >&2; exit 1; }; echo "$n" && exec head -c "$2" -- "$1"`
	var stderr bytes.Buffer
	out := &cappedBuffer{max: limit + 32}
	code, err := b.Exec(ctx, name, []string{"sh", "-c", script, "sh", path, strconv.FormatInt(limit, 10)}, ExecIO{Stdout: out, Stderr: &stderr})
	if out.over {
		return nil, fmt.Errorf("read %s in sandbox %q: more than %d bytes", path, name, limit)
	}
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("read %s in sandbox %q: exit %d: %s", path, name, code, strings.TrimSpace(stderr.String()))
	}
	size, data, _ := bytes.Cut(out.b.Bytes(), []byte("\n"))
	n, err := strconv.Atoi(strings.TrimSpace(string(size)))
	if err != nil || n != len(data) {
		return nil, fmt.Errorf("read %s in sandbox %q: %d bytes arrived of %s", path, name, len(data), strings.TrimSpace(string(size)))
	}
	return data, nil
}

// cappedBuffer keeps at most max bytes and fails the write that would
// go past them (the exec's stream then ends).
type cappedBuffer struct {
	b    bytes.Buffer
	max  int64
	over bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if int64(c.b.Len()+len(p)) > c.max {
		c.over = true
		return 0, errors.New("output over its limit")
	}
	return c.b.Write(p)
}

// checkSandboxPath accepts an absolute path without NUL.
func checkSandboxPath(p string) error {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("path %q: give an absolute path inside the sandbox", p)
	}
	return nil
}
