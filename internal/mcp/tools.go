package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/detect"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// DefaultTimeout bounds a sandbox_run that names no timeout_ms when
// agentkernel.toml sets no resources.timeout either (the contract's
// default of 30000 ms).
const DefaultTimeout = 30 * time.Second

// maxOutput is how much of a command's output a result carries; the rest
// is cut from the middle.
const maxOutput = 1 << 20

// maxFileRead is the largest file sandbox_file_read returns.
const maxFileRead = 8 << 20

type runInput struct {
	Command           []string          `json:"command" jsonschema:"the command and its arguments, e.g. [\"sh\",\"-c\",\"make test\"]"`
	Image             string            `json:"image,omitempty" jsonschema:"OCI image to run in (default: detected from the command and the project files, e.g. python3 → python:3.12-alpine; \"host\" = the host's own tools read-only)"`
	Fast              *bool             `json:"fast,omitempty" jsonschema:"accepted for compatibility; every run already starts in tens of milliseconds"`
	Cwd               string            `json:"cwd,omitempty" jsonschema:"absolute host path of the project directory, shown at /workspace as the profile says (moderate: copy-on-write, permissive: read-write, restrictive: hidden); default: the server's working directory. It must be that directory or below it, or a directory listed in [mcp] allowed_dirs of the server's configuration"`
	Env               map[string]string `json:"env,omitempty" jsonschema:"environment variables for the command, as an object of strings"`
	TimeoutMS         int64             `json:"timeout_ms,omitempty" jsonschema:"stop the command after this many milliseconds (default 30000, or resources.timeout of agentkernel.toml)"`
	Profile           string            `json:"profile,omitempty" jsonschema:"security profile (default moderate)"`
	Network           *bool             `json:"network,omitempty" jsonschema:"network egress: false forces loopback only; true turns egress on as the profile and compatibility mode give it (filtered by the mode's allow list; cloud metadata and host addresses refused unless [network] allow_cidrs of the configuration names them)"`
	CompatibilityMode string            `json:"compatibility_mode,omitempty" jsonschema:"agent compatibility mode (default native)"`
	Backend           string            `json:"backend,omitempty" jsonschema:"backend to run on: native (the default), or docker, podman, gvisor where this server has them, or auto (the strongest that works here for this run)"`
}

type nameInput struct {
	Name string `json:"name" jsonschema:"sandbox name: 1-63 letters, digits, '-' and '_'"`
}

type createInput struct {
	Name    string `json:"name" jsonschema:"sandbox name: 1-63 letters, digits, '-' and '_'"`
	Image   string `json:"image,omitempty" jsonschema:"OCI image (default: detected from the project files, else alpine:3.20)"`
	Backend string `json:"backend,omitempty" jsonschema:"backend the sandbox runs on: native (the default), or docker, podman, gvisor where this server has them, or auto (picked when it is made)"`
}

type execInput struct {
	Name      string   `json:"name" jsonschema:"sandbox name"`
	Command   []string `json:"command" jsonschema:"the command and its arguments"`
	TimeoutMS int64    `json:"timeout_ms,omitempty" jsonschema:"kill the command after this many milliseconds (default: no limit)"`
}

type fileWriteInput struct {
	Name    string `json:"name" jsonschema:"sandbox name"`
	Path    string `json:"path" jsonschema:"absolute path inside the sandbox; parent directories are created"`
	Content string `json:"content" jsonschema:"the file's new content (UTF-8 text)"`
}

type fileReadInput struct {
	Name string `json:"name" jsonschema:"sandbox name"`
	Path string `json:"path" jsonschema:"absolute path inside the sandbox"`
}

type listInput struct{}

// register adds the nine tools and returns their names.
func (t *tools) register(s *sdk.Server) map[string]bool {
	names := map[string]bool{}
	add := func(name string) { names[name] = true }

	sdk.AddTool(s, &sdk.Tool{Name: "sandbox_run", Title: "Run a command in a fresh sandbox",
		Description: "Run a command in a fresh, isolated sandbox that is removed afterwards, and return its combined stdout and stderr. " +
			"SAFE: executes in isolation (own namespaces, overlay root, seccomp, a network that reaches only what the policy allows); under the default moderate profile the project directory is visible at /workspace copy-on-write, so the host is never changed. " +
			"A non-zero exit status is an error result that still carries the output.",
		InputSchema: schemaFor[runInput](map[string][]any{
			"profile":            {"permissive", "moderate", "restrictive"},
			"compatibility_mode": {"native", "claude", "codex", "gemini"},
		}, map[string]any{"timeout_ms": 1}),
		Annotations: &sdk.ToolAnnotations{Title: "Run in sandbox", DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, t.run)
	add("sandbox_run")

	sdk.AddTool(s, &sdk.Tool{Name: "sandbox_create", Title: "Create and start a persistent sandbox",
		Description: "Create a persistent sandbox and start it. Its files survive between calls and across stop/start; use sandbox_exec, sandbox_file_write and sandbox_file_read on it, sandbox_remove when done.",
		InputSchema: schemaFor[createInput](nil, nil)}, t.create)
	add("sandbox_create")

	sdk.AddTool(s, &sdk.Tool{Name: "sandbox_exec", Title: "Run a command in a persistent sandbox",
		Description: "Run a command in a running persistent sandbox and return its combined output. SAFE: executes in isolation, cannot affect the host. A non-zero exit status is an error result that still carries the output.",
		InputSchema: schemaFor[execInput](nil, nil)}, t.exec)
	add("sandbox_exec")

	sdk.AddTool(s, &sdk.Tool{Name: "sandbox_list", Title: "List persistent sandboxes",
		Description: "List persistent sandboxes: name, status, image and backend, tab-separated.",
		InputSchema: schemaFor[listInput](nil, nil),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.list)
	add("sandbox_list")

	sdk.AddTool(s, &sdk.Tool{Name: "sandbox_remove", Title: "Remove a persistent sandbox",
		Description: "Stop (if running) and remove a persistent sandbox with its files.",
		InputSchema: schemaFor[nameInput](nil, nil),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}}, t.remove)
	add("sandbox_remove")

	sdk.AddTool(s, &sdk.Tool{Name: "sandbox_file_write", Title: "Write a file in a sandbox",
		Description: "Create or replace a text file inside a running persistent sandbox (parent directories are created).",
		InputSchema: schemaFor[fileWriteInput](nil, nil)}, t.fileWrite)
	add("sandbox_file_write")

	sdk.AddTool(s, &sdk.Tool{Name: "sandbox_file_read", Title: "Read a file from a sandbox",
		Description: "Read a file inside a running persistent sandbox. Text comes back as is; other bytes base64-encoded after a one-line note.",
		InputSchema: schemaFor[fileReadInput](nil, nil),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, t.fileRead)
	add("sandbox_file_read")

	sdk.AddTool(s, &sdk.Tool{Name: "sandbox_start", Title: "Start a persistent sandbox",
		Description: "Start a stopped persistent sandbox; its files are as they were when it stopped.",
		InputSchema: schemaFor[nameInput](nil, nil)}, t.start)
	add("sandbox_start")

	sdk.AddTool(s, &sdk.Tool{Name: "sandbox_stop", Title: "Stop a persistent sandbox",
		Description: "Stop a running persistent sandbox (SIGTERM to its processes, SIGKILL after 3 s); its files are kept.",
		InputSchema: schemaFor[nameInput](nil, nil)}, t.stop)
	add("sandbox_stop")
	return names
}

func ptr[T any](v T) *T { return &v }

// schemaFor infers T's input schema and tidies it for clients: optional
// pointer fields become their plain type, enums and minimums are added.
func schemaFor[T any](enums map[string][]any, minimum map[string]any) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(err) // a programming error in the input types above
	}
	s.Type, s.Types = "object", nil
	if s.Properties == nil {
		s.Properties = map[string]*jsonschema.Schema{}
	}
	for name, p := range s.Properties {
		if len(p.Types) == 2 && p.Types[0] == "null" {
			p.Type, p.Types = p.Types[1], nil
		}
		if e, ok := enums[name]; ok {
			p.Enum = e
		}
		if m, ok := minimum[name]; ok {
			f := float64(m.(int))
			p.Minimum = &f
		}
	}
	return s
}

// run is sandbox_run: resolve a spec as `agentkernel run` does, run it,
// and return the combined output.
func (t *tools) run(ctx context.Context, req *sdk.CallToolRequest, in runInput) (*sdk.CallToolResult, any, error) {
	if len(in.Command) == 0 || in.Command[0] == "" {
		return errorResult("command is required: an array of strings such as [\"echo\",\"hi\"]"), nil, nil
	}
	if in.TimeoutMS < 0 {
		return errorResult("timeout_ms must not be negative"), nil, nil
	}
	if in.Backend == "" {
		in.Backend = t.opts.Backend // the server's default ([sandbox] backend)
	}
	if in.Backend != "" {
		if err := t.opts.Manager.Known(in.Backend); err != nil {
			return errorResult("backend: " + err.Error()), nil, nil
		}
	}
	dir := t.opts.Dir
	if in.Cwd != "" {
		var err error
		if dir, err = t.confine("cwd", in.Cwd); err != nil {
			return errorResult(err.Error()), nil, nil
		}
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return errorResult(fmt.Sprintf("cwd %s: not a directory", dir)), nil, nil
	}
	// The server's configuration, whatever the cwd: an agentkernel.toml
	// there could otherwise loosen the sandbox of the agent that wrote it.
	cfg, err := t.config()
	if err != nil {
		return errorResult(err.Error()), nil, nil
	}
	t.noteOwnConfig(dir)
	o := policy.Overrides{Set: map[string]bool{}}
	if in.Image != "" {
		o.Image, o.Set["image"] = in.Image, true
	}
	if in.Profile != "" {
		o.Profile, o.Set["profile"] = in.Profile, true
	}
	if in.CompatibilityMode != "" {
		o.Mode, o.Set["mode"] = in.CompatibilityMode, true
	}
	switch {
	case in.TimeoutMS > 0:
		o.Timeout, o.Set["timeout"] = time.Duration(in.TimeoutMS)*time.Millisecond, true
	case !cfg.IsSet("resources.timeout"):
		o.Timeout, o.Set["timeout"] = DefaultTimeout, true
	}
	if in.Network != nil {
		if *in.Network {
			o.Network, o.Set["network"] = config.NetworkOn, true
		} else {
			o.NoNetwork, o.Set["no-network"] = true, true
		}
	}
	keys := make([]string, 0, len(in.Env))
	for k := range in.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errorResult(fmt.Sprintf("env: bad variable name %q", k)), nil, nil
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o.Env = append(o.Env, k+"="+in.Env[k])
	}
	det := detect.Image(detect.Input{ExplicitImage: o.Image, ConfigImage: cfg.Sandbox.BaseImage, ConfigRuntime: cfg.Sandbox.Runtime, Args: in.Command, Dir: dir})
	spec, warnings, err := policy.Resolve(policy.Input{Config: cfg, Overrides: o, Args: in.Command, Cwd: dir,
		HomeDir: t.opts.HomeDir, HostEnv: os.LookupEnv, Detected: det, DataDir: t.opts.DataDir})
	if err != nil {
		return errorResult(err.Error()), nil, nil
	}
	if err := t.checkMounts(spec); err != nil {
		if in.Cwd != "" {
			err = fmt.Errorf("cwd %q: %w", in.Cwd, err)
		}
		return errorResult(err.Error()), nil, nil
	}
	for _, w := range warnings {
		t.opts.Warn("%s", w)
	}
	if w, err := policy.CheckEgress(spec, o.Network != "" || cfg.IsSet("security.network")); err != nil {
		return errorResult(err.Error() + "; drop network:true (or pass network:false) to run without it"), nil, nil
	} else if w != "" {
		t.opts.Warn("%s", w)
	}
	if t.opts.ServerSecrets != nil {
		if err := t.opts.ServerSecrets(ctx, cfg, spec, false); err != nil {
			return errorResult(err.Error()), nil, nil
		}
	}
	spec.TTY, spec.Interactive = false, false

	out := newOutput(ctx, req)
	defer out.stop()
	w, finish, err := out.stdio()
	if err != nil {
		return errorResult(err.Error()), nil, nil
	}
	res, err := t.opts.Manager.Run(ctx, in.Backend, spec, sandbox.Stdio{Stdout: w, Stderr: w})
	finish()
	// What the network policy refused and what the memory limit
	// killed, where the agent reads it.
	text := sandbox.AppendNote(sandbox.AppendNote(out.text(), res.NetworkSummary), res.OOMText())
	switch {
	case err != nil:
		code := 125
		if errors.Is(err, sandbox.ErrNotFound) {
			code = 127
		} else if errors.Is(err, sandbox.ErrCannotInvoke) {
			code = 126
		}
		return errorResult(fmt.Sprintf("exit code %d: %v%s", code, err, prefixNL(text))), nil, nil
	case res.TimedOut:
		return errorResult(fmt.Sprintf("command timed out after %s and was stopped (exit code 124)%s", spec.Resources.Timeout, prefixNL(text))), nil, nil
	case res.ExitCode != 0:
		return errorResult(fmt.Sprintf("command exited with code %d%s", res.ExitCode, prefixNL(text))), nil, nil
	}
	return textResult(text), nil, nil
}

func prefixNL(s string) string {
	if s == "" {
		return ""
	}
	return "\n" + s
}

// maxNoted bounds the files noteOwnConfig remembers (a client can make
// any number of directories); past it, it stays quiet.
const maxNoted = 256

// noteOwnConfig warns, once per directory, that the agentkernel.toml of
// a cwd other than the server's project directory is not read.
func (t *tools) noteOwnConfig(dir string) {
	if dir == t.dirReal {
		return
	}
	own := filepath.Join(dir, config.FileName)
	if _, err := os.Lstat(own); err != nil {
		return
	}
	t.mu.Lock()
	seen := t.noted[own] || len(t.noted) >= maxNoted
	if t.noted == nil {
		t.noted = map[string]bool{}
	}
	if !seen {
		t.noted[own] = true
	}
	t.mu.Unlock()
	if !seen {
		t.opts.Warn("%s is not read: the MCP server's own configuration applies to every tool call, whatever its cwd (start the server in %s to use that file)", own, dir)
	}
}

// config is the server's configuration, loaded when it started.
func (t *tools) config() (*config.Config, error) {
	if t.cfgErr != nil {
		return nil, fmt.Errorf("the MCP server's configuration: %w (fix it and restart the server)", t.cfgErr)
	}
	return t.cfg, nil
}

func (t *tools) create(ctx context.Context, req *sdk.CallToolRequest, in createInput) (*sdk.CallToolResult, any, error) {
	if err := sandbox.ValidateName(in.Name); err != nil {
		return errorResult(err.Error()), nil, nil
	}
	if in.Backend == "" {
		in.Backend = t.opts.Backend // the server's default ([sandbox] backend)
	}
	if in.Backend != "" {
		if err := t.opts.Manager.Known(in.Backend); err != nil {
			return errorResult("backend: " + err.Error()), nil, nil
		}
	}
	dir := t.opts.Dir
	cfg, err := t.config()
	if err != nil {
		return errorResult(err.Error()), nil, nil
	}
	o := policy.Overrides{Name: in.Name, Image: in.Image}
	det := detect.Image(detect.Input{ExplicitImage: in.Image, ConfigImage: cfg.Sandbox.BaseImage, ConfigRuntime: cfg.Sandbox.Runtime, Dir: dir})
	spec, warnings, err := policy.Resolve(policy.Input{Config: cfg, Overrides: o, Cwd: dir, HomeDir: t.opts.HomeDir, HostEnv: os.LookupEnv, Detected: det, DataDir: t.opts.DataDir})
	if err != nil {
		return errorResult(err.Error()), nil, nil
	}
	if err := t.checkMounts(spec); err != nil {
		return errorResult(err.Error()), nil, nil
	}
	for _, w := range warnings {
		t.opts.Warn("%s", w)
	}
	if w, err := policy.CheckEgress(spec, cfg.IsSet("security.network")); err != nil {
		return errorResult(err.Error()), nil, nil
	} else if w != "" {
		t.opts.Warn("%s", w)
	}
	if t.opts.ServerSecrets != nil {
		if err := t.opts.ServerSecrets(ctx, cfg, spec, true); err != nil {
			return errorResult(err.Error()), nil, nil
		}
	}
	info, _, err := t.opts.Manager.Create(ctx, sandbox.CreateRequest{Name: in.Name, Spec: spec, Start: true, Backend: in.Backend})
	if err != nil {
		return sandboxError(in.Name, err), nil, nil
	}
	if info.RequestedImage != "" {
		return textResult(fmt.Sprintf("Sandbox '%s' created and started with image 'host': %s is not cached and its registry cannot be reached, so the sandbox runs the host's own tools (read-only) instead.", info.Name, info.RequestedImage)), nil, nil
	}
	return textResult(fmt.Sprintf("Sandbox '%s' created and started with image '%s'.", info.Name, info.Image)), nil, nil
}

func (t *tools) exec(ctx context.Context, req *sdk.CallToolRequest, in execInput) (*sdk.CallToolResult, any, error) {
	if err := sandbox.ValidateName(in.Name); err != nil {
		return errorResult(err.Error()), nil, nil
	}
	if len(in.Command) == 0 || in.Command[0] == "" {
		return errorResult("command is required: an array of strings such as [\"ls\",\"-l\"]"), nil, nil
	}
	if in.TimeoutMS < 0 {
		return errorResult("timeout_ms must not be negative"), nil, nil
	}
	timeout := time.Duration(in.TimeoutMS) * time.Millisecond
	out := newOutput(ctx, req)
	defer out.stop()
	w, finish, err := out.stdio()
	if err != nil {
		return errorResult(err.Error()), nil, nil
	}
	res, err := t.opts.Manager.Exec(ctx, in.Name, sandbox.ExecRequest{Args: in.Command, Timeout: timeout}, sandbox.Stdio{Stdout: w, Stderr: w}, nil)
	finish()
	text := sandbox.AppendNote(out.text(), res.OOMText())
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return errorResult(fmt.Sprintf("command exited with code 127: %v%s", err, prefixNL(text))), nil, nil
	case errors.Is(err, sandbox.ErrCannotInvoke):
		return errorResult(fmt.Sprintf("command exited with code 126: %v%s", err, prefixNL(text))), nil, nil
	case err != nil:
		return sandboxError(in.Name, err), nil, nil
	case res.TimedOut:
		return errorResult(fmt.Sprintf("command timed out after %s and was stopped (exit code 124)%s", timeout, prefixNL(text))), nil, nil
	case res.ExitCode != 0:
		return errorResult(fmt.Sprintf("command exited with code %d%s", res.ExitCode, prefixNL(text))), nil, nil
	}
	return textResult(text), nil, nil
}

func (t *tools) list(ctx context.Context, req *sdk.CallToolRequest, in listInput) (*sdk.CallToolResult, any, error) {
	all, err := t.opts.Manager.List(ctx, sandbox.ListOptions{})
	if err != nil {
		return sandboxError("", err), nil, nil
	}
	if len(all) == 0 {
		return textResult("No sandboxes found."), nil, nil
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 1, '\t', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tIMAGE\tBACKEND")
	for _, sb := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", sb.Name, sb.Status, sb.ImageLabel(), sb.Backend)
	}
	_ = tw.Flush()
	return textResult(b.String()), nil, nil
}

func (t *tools) remove(ctx context.Context, req *sdk.CallToolRequest, in nameInput) (*sdk.CallToolResult, any, error) {
	if err := sandbox.ValidateName(in.Name); err != nil {
		return errorResult(err.Error()), nil, nil
	}
	if err := t.opts.Manager.Remove(ctx, in.Name, true); err != nil {
		return sandboxError(in.Name, err), nil, nil
	}
	return textResult(fmt.Sprintf("Sandbox '%s' removed.", in.Name)), nil, nil
}

func (t *tools) fileWrite(ctx context.Context, req *sdk.CallToolRequest, in fileWriteInput) (*sdk.CallToolResult, any, error) {
	if err := sandbox.ValidateName(in.Name); err != nil {
		return errorResult(err.Error()), nil, nil
	}
	if !strings.HasPrefix(in.Path, "/") {
		return errorResult(fmt.Sprintf("path %q: must be absolute", in.Path)), nil, nil
	}
	n, err := t.opts.Manager.WriteFile(ctx, in.Name, in.Path, strings.NewReader(in.Content), 0o644)
	if err != nil {
		return sandboxError(in.Name, err), nil, nil
	}
	return textResult(fmt.Sprintf("Wrote %d bytes to '%s' in sandbox '%s'.", n, in.Path, in.Name)), nil, nil
}

func (t *tools) fileRead(ctx context.Context, req *sdk.CallToolRequest, in fileReadInput) (*sdk.CallToolResult, any, error) {
	if err := sandbox.ValidateName(in.Name); err != nil {
		return errorResult(err.Error()), nil, nil
	}
	if !strings.HasPrefix(in.Path, "/") {
		return errorResult(fmt.Sprintf("path %q: must be absolute", in.Path)), nil, nil
	}
	var buf limitedBuffer
	buf.max = maxFileRead
	if _, err := t.opts.Manager.ReadFile(ctx, in.Name, in.Path, &buf); err != nil {
		if errors.Is(err, errTooBig) {
			return errorResult(fmt.Sprintf("%s is larger than %d bytes; read it in parts with sandbox_exec (e.g. head -c)", in.Path, maxFileRead)), nil, nil
		}
		return sandboxError(in.Name, err), nil, nil
	}
	b := buf.Bytes()
	if utf8.Valid(b) {
		return textResult(string(b)), nil, nil
	}
	return textResult(fmt.Sprintf("[binary file, %d bytes, base64 encoded]\n%s", len(b), base64.StdEncoding.EncodeToString(b))), nil, nil
}

func (t *tools) start(ctx context.Context, req *sdk.CallToolRequest, in nameInput) (*sdk.CallToolResult, any, error) {
	if err := sandbox.ValidateName(in.Name); err != nil {
		return errorResult(err.Error()), nil, nil
	}
	info, err := t.opts.Manager.Get(ctx, in.Name)
	if err != nil {
		return sandboxError(in.Name, err), nil, nil
	}
	if info.Status == sandbox.StatusRunning {
		return textResult(fmt.Sprintf("Sandbox '%s' is already running.", in.Name)), nil, nil
	}
	if _, err := t.opts.Manager.Start(ctx, in.Name); err != nil {
		return sandboxError(in.Name, err), nil, nil
	}
	return textResult(fmt.Sprintf("Sandbox '%s' started.", in.Name)), nil, nil
}

func (t *tools) stop(ctx context.Context, req *sdk.CallToolRequest, in nameInput) (*sdk.CallToolResult, any, error) {
	if err := sandbox.ValidateName(in.Name); err != nil {
		return errorResult(err.Error()), nil, nil
	}
	info, err := t.opts.Manager.Get(ctx, in.Name)
	if err != nil {
		return sandboxError(in.Name, err), nil, nil
	}
	if info.Status != sandbox.StatusRunning {
		return textResult(fmt.Sprintf("Sandbox '%s' is already stopped.", in.Name)), nil, nil
	}
	if _, err := t.opts.Manager.Stop(ctx, in.Name); err != nil {
		return sandboxError(in.Name, err), nil, nil
	}
	return textResult(fmt.Sprintf("Sandbox '%s' stopped.", in.Name)), nil, nil
}

// sandboxError words a persistent-sandbox failure with the next step.
func sandboxError(name string, err error) *sdk.CallToolResult {
	switch {
	case errors.Is(err, sandbox.ErrSandboxNotFound):
		return errorResult(fmt.Sprintf("Sandbox '%s' not found. Create it first with sandbox_create.", name))
	case errors.Is(err, sandbox.ErrSandboxExists):
		return errorResult(fmt.Sprintf("Sandbox '%s' already exists. Use it with sandbox_exec, or sandbox_remove it first.", name))
	case errors.Is(err, sandbox.ErrNotRunning):
		return errorResult(fmt.Sprintf("Sandbox '%s' is not running. Start it first with sandbox_start.", name))
	case errors.Is(err, sandbox.ErrUnsupported):
		return errorResult("persistent sandboxes are not available on this system: " + err.Error())
	}
	return errorResult(err.Error())
}

var errTooBig = errors.New("file too large")

// limitedBuffer fails writes past max bytes.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if l.Len()+len(p) > l.max {
		return 0, errTooBig
	}
	return l.Buffer.Write(p)
}
