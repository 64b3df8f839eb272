package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	apispec "github.com/agentkernel/agentkernel/api"
	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Each handler: decode → one Manager call → encode.

// SandboxInfo is a sandbox on the wire.
type SandboxInfo struct {
	Name    string `json:"name"`
	Status  string `json:"status"`
	Backend string `json:"backend"`
	UUID    string `json:"uuid,omitempty"`
	Image   string `json:"image,omitempty"`
	// RequestedImage is the image asked for when Image is "host"
	// instead: it could not be had, and the sandbox runs the host's
	// tools.
	RequestedImage string            `json:"requested_image,omitempty"`
	VCPUs          int64             `json:"vcpus,omitempty"`
	MemoryMB       int64             `json:"memory_mb,omitempty"`
	CreatedAt      string            `json:"created_at,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Description    string            `json:"description,omitempty"`
	IP             string            `json:"ip,omitempty"`
	ExpiresAt      string            `json:"expires_at,omitempty"`
}

func (s *Server) info(i *sandbox.Info) SandboxInfo {
	out := SandboxInfo{Name: i.Name, Status: i.Status, Backend: i.Backend, UUID: i.UUID, Image: i.Image, RequestedImage: i.RequestedImage,
		MemoryMB: i.Resources.MemoryMB, Labels: i.Labels, Description: i.Description, IP: i.IP}
	if out.Status != sandbox.StatusRunning {
		out.Status = sandbox.StatusStopped // the SDKs know these two only
	}
	if out.Backend == "" {
		out.Backend = s.opts.Backend
	}
	if c := i.Resources.CPUPercent; c > 0 {
		out.VCPUs = (c + 99) / 100
	}
	if !i.CreatedAt.IsZero() {
		out.CreatedAt = i.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	if i.ExpiresAt != nil {
		out.ExpiresAt = i.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return out
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeData(w, http.StatusOK, "ok")
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(apispec.OpenAPI)
}

// StatusPool is one warm pool in GET /status: its image, profile and
// agent mode, and how many prepared sandboxes it holds ready.
type StatusPool struct {
	Backend string `json:"backend"`
	Image   string `json:"image"`
	Profile string `json:"profile"`
	Mode    string `json:"mode,omitempty"`
	Ready   int    `json:"ready"`
}

// Status is the data of GET /status: the contract's version, backend
// and api_key_configured, then what this server holds (its uptime, its
// warm pools, and how fast runs were served), which 'daemon status'
// shows.
type Status struct {
	Version          string            `json:"version"`
	Backend          string            `json:"backend"`
	APIKeyConfigured bool              `json:"api_key_configured"`
	UptimeSeconds    int64             `json:"uptime_seconds"`
	Pools            []StatusPool      `json:"pools"`
	PoolRuns         map[string]uint64 `json:"pool_runs"`
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	st := Status{Version: s.opts.Version, Backend: s.opts.Backend, APIKeyConfigured: len(s.keys) > 0,
		UptimeSeconds: int64(time.Since(s.started).Seconds()), Pools: []StatusPool{}, PoolRuns: map[string]uint64{}}
	for _, ps := range s.pools.sizes() {
		st.Pools = append(st.Pools, StatusPool{Backend: ps.backend, Image: ps.image, Profile: ps.profile, Mode: ps.mode, Ready: ps.ready})
	}
	sort.Slice(st.Pools, func(i, j int) bool {
		if st.Pools[i].Image != st.Pools[j].Image {
			return st.Pools[i].Image < st.Pools[j].Image
		}
		return st.Pools[i].Profile < st.Pools[j].Profile
	})
	s.metrics.mu.Lock()
	for k, n := range s.metrics.poolRuns {
		st.PoolRuns[k] = n
	}
	s.metrics.mu.Unlock()
	writeData(w, http.StatusOK, st)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	_, host, err := s.opts.Manager.Stats(r.Context(), 0)
	if err != nil {
		s.fail(w, "", err)
		return
	}
	const mib = 1 << 20
	writeData(w, http.StatusOK, map[string]any{
		"sandbox_count": host.Sandboxes, "sandbox_limit": 0, "backend": s.opts.Backend,
		"uptime_seconds": int64(time.Since(s.started).Seconds()), "version": s.opts.Version,
		"resource_usage": map[string]any{"cpu_percent": host.CPUPercent, "memory_used_mb": host.MemoryUsedBytes / mib,
			"memory_total_mb": host.MemoryTotalBytes / mib, "disk_used_mb": host.DataDirBytes / mib},
	})
}

// runRequest is the body of /run, /run/stream and a /batch/run item.
type runRequest struct {
	Command []string `json:"command"`
	Image   string   `json:"image"`
	Profile string   `json:"profile"`
	// Fast asks for a sandbox from the warm pool (default true; pool.go);
	// either way each request gets a clean sandbox.
	Fast *bool `json:"fast"`
	// Network is the network mode (true, false, "none", "filtered",
	// "full"), AllowDomains and BlockDomains its name rules.
	Network      networkField `json:"network"`
	AllowDomains []string     `json:"allow_domains"`
	BlockDomains []string     `json:"block_domains"`
	// Secrets are secret bindings as 'run -S' takes them: the value is
	// added to HTTPS requests to the host without entering the sandbox.
	Secrets []string `json:"secrets"`
	// TimeoutMS stops the command after this many milliseconds (exit
	// code 124).
	TimeoutMS *int64 `json:"timeout_ms"`
	// Backend runs the command on another of the server's backends
	// (docker, podman, gvisor); "" is the server's own. A fast run takes
	// a warm sandbox of that backend's pool (each backend that can
	// prepare sandboxes has pools of its own).
	Backend string `json:"backend"`
}

// maxSecrets bounds a request's secret bindings.
const maxSecrets = 32

// networkField is a request's "network": a boolean (upstream's form) or
// a mode name.
type networkField struct{ set config.NetworkSetting }

func (n *networkField) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		n.set = ""
	case bool:
		n.set = config.NetworkOff
		if x {
			n.set = config.NetworkOn
		}
	case string:
		m, err := config.ParseNetworkSetting(x)
		if err != nil {
			return err
		}
		n.set = m
	default:
		return fmt.Errorf("network: use true, false, \"none\", \"filtered\" or \"full\"")
	}
	return nil
}

func (q *runRequest) fast() bool { return q.Fast == nil || *q.Fast }

// spec resolves a run request into a Spec (400 on bad input).
func (s *Server) spec(r *http.Request, q runRequest) (*sandbox.Spec, error) {
	if len(q.Command) == 0 {
		return nil, badRequest("command is required")
	}
	if s.opts.Resolve == nil {
		return nil, fmt.Errorf("the server has no spec resolver")
	}
	if len(q.Secrets) > maxSecrets {
		return nil, badRequest("secrets: %d bindings, more than %d", len(q.Secrets), maxSecrets)
	}
	backend, err := s.backend(q.Backend)
	if err != nil {
		return nil, err
	}
	spec, err := s.opts.Resolve(r.Context(), RunSpec{Args: q.Command, Image: q.Image, Profile: profileName(q.Profile),
		Network: q.Network.set, AllowDomains: q.AllowDomains, BlockDomains: q.BlockDomains, Secrets: q.Secrets, Backend: backend})
	if err != nil {
		return nil, badRequest("%s", err.Error())
	}
	if d, err := timeoutMS(q.TimeoutMS); err != nil {
		return nil, err
	} else if d > 0 {
		spec.Resources.Timeout = d
	}
	spec.Backend = backend
	return spec, nil
}

// backend is a request's "backend", checked against the backends this
// server has (400 otherwise); none named is the server's default
// (Options.Backend). Native answers "" (the Manager's own).
func (s *Server) backend(name string) (string, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		name = strings.ToLower(s.opts.Backend)
	}
	if name == "" || name == "native" {
		return "", nil
	}
	if err := s.opts.Manager.Known(name); err != nil {
		return "", badRequest("backend: %s", err.Error())
	}
	return name, nil
}

// profileName lower-cases a profile and maps upstream's "custom" (which
// meant moderate) to moderate.
func profileName(p string) string {
	p = strings.ToLower(strings.TrimSpace(p))
	if p == "custom" {
		return "moderate"
	}
	return p
}

// lockedBuffer collects stdout and stderr interleaved, as a terminal
// would show them.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// execute runs spec's command in a clean sandbox: with fast, one taken
// from the warm pool (discarded afterwards) when the spec can be pooled,
// else a fresh ephemeral one.
func (s *Server) execute(ctx context.Context, spec *sandbox.Spec, fast bool, stdio sandbox.Stdio) (sandbox.Result, error) {
	start := time.Now()
	defer func() { s.metrics.run(time.Since(start)) }()
	// A refused command must not use up (and discard) a warm sandbox.
	if err := spec.Commands.Check(spec.Args); err != nil {
		return sandbox.Result{}, err
	}
	// "auto" is decided per run, before the pools: a run takes the warm
	// pool of the backend auto gives it.
	if b := s.opts.Manager.Pick(ctx, spec.Backend, spec); b != spec.Backend {
		spec.Backend = b
		if strings.EqualFold(b, "native") {
			spec.Backend = ""
		}
	}
	if fast && s.pools.preparable(spec.Backend) {
		sb, why, done := s.pools.take(spec)
		s.metrics.poolRun(why)
		if sb != nil {
			defer done()
			res, err := sb.Run(ctx, spec.Args, stdio, nil)
			s.opts.Manager.AuditDenials(spec, res.NetworkDenials, start)
			s.metrics.networkDenials(res.NetworkDenials)
			s.metrics.secrets(res)
			return res, err
		}
	}
	res, err := s.opts.Manager.Run(ctx, spec.Backend, spec, stdio)
	s.metrics.networkDenials(res.NetworkDenials)
	s.metrics.secrets(res)
	return res, err
}

// RunLocal runs spec for a local client of the daemon (its run socket),
// forwarding sigs: in a warm sandbox from the pool when there is one
// ("hit"), else, on native, in a sandbox prepared for it ("prepared").
// On another backend (spec.Backend: gvisor, docker, podman) a run that
// finds its pool empty fails with sandbox.ErrUnsupported, nothing having
// run: booting such a sandbox and then exec'ing the command costs more
// than the client's own cold run, which it does instead while the pool
// fills for the next one. Specs the pools cannot take, and backends
// without pools, fail the same way.
func (s *Server) RunLocal(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio, sigs <-chan os.Signal, warn func(string)) (sandbox.Result, string, error) {
	start := time.Now()
	defer func() { s.metrics.run(time.Since(start)) }()
	if !poolable(spec) {
		return sandbox.Result{}, "", fmt.Errorf("this run cannot use a prepared sandbox: %w", sandbox.ErrUnsupported)
	}
	native := spec.Backend == "" || strings.EqualFold(spec.Backend, "native")
	if !native && !s.pools.preparable(spec.Backend) {
		return sandbox.Result{}, "", fmt.Errorf("backend %q has no warm pools in this daemon: %w", spec.Backend, sandbox.ErrUnsupported)
	}
	// A refused command must not use up a warm sandbox, nor have one
	// prepared for it.
	if err := spec.Commands.Check(spec.Args); err != nil {
		return sandbox.Result{}, "", err
	}
	sb, why, done := s.pools.take(spec)
	defer done()
	s.metrics.poolRun(why)
	served := "hit"
	if sb == nil && !native {
		return sandbox.Result{}, "", fmt.Errorf("no warm %s sandbox ready (%s): %w", spec.Backend, why, sandbox.ErrUnsupported)
	}
	if sb == nil {
		var err error
		if sb, err = s.opts.Manager.Prepare(ctx, spec.Backend, spec); err != nil {
			return sandbox.Result{}, "", err
		}
		served = "prepared"
	}
	if warn != nil {
		for _, w := range sb.Warnings() {
			warn(w)
		}
	}
	res, err := sb.Run(ctx, spec.Args, stdio, sigs)
	s.opts.Manager.AuditDenials(spec, res.NetworkDenials, start)
	s.metrics.networkDenials(res.NetworkDenials)
	return res, served, err
}

// Prewarm keeps count sandboxes of spec ready in its pool (min_warm when
// count is 0, never more than max_warm).
func (s *Server) Prewarm(spec *sandbox.Spec, count int) error { return s.pools.prewarm(spec, count) }

// runOnce runs one command in a clean sandbox and returns its output, or
// the 409 of a non-zero exit.
func (s *Server) runOnce(r *http.Request, spec *sandbox.Spec, fast bool) (string, error) {
	var out lockedBuffer
	res, err := s.execute(r.Context(), spec, fast, sandbox.Stdio{Stdout: &out, Stderr: &out})
	if err != nil {
		return "", err
	}
	text := sandbox.AppendNote(out.String(), res.OOMText())
	if res.TimedOut {
		return "", timeoutError(spec.Resources.Timeout, text)
	}
	if res.ExitCode != 0 {
		return "", exitError(res.ExitCode, text)
	}
	return text, nil
}

func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	var q runRequest
	if err := decode(w, r, &q, false); err != nil {
		s.fail(w, "", err)
		return
	}
	spec, err := s.spec(r, q)
	if err != nil {
		s.fail(w, "", err)
		return
	}
	out, err := s.runOnce(r, spec, q.fast())
	if err != nil {
		s.fail(w, "", err)
		return
	}
	writeData(w, http.StatusOK, map[string]string{"output": out})
}

type batchResult struct {
	Output *string `json:"output"`
	Error  *string `json:"error"`
}

func (s *Server) batchRun(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Commands []runRequest `json:"commands"`
	}
	if err := decode(w, r, &q, false); err != nil {
		s.fail(w, "", err)
		return
	}
	if len(q.Commands) == 0 {
		s.fail(w, "", badRequest("commands array is required and must not be empty"))
		return
	}
	results := make([]batchResult, len(q.Commands))
	sem := make(chan struct{}, s.opts.BatchParallel)
	var wg sync.WaitGroup
	for i, c := range q.Commands {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			spec, err := s.spec(r, c)
			var out string
			if err == nil {
				out, err = s.runOnce(r, spec, c.fast())
			}
			if err != nil {
				msg := err.Error()
				results[i].Error = &msg
				return
			}
			results[i].Output = &out
		})
	}
	wg.Wait()
	writeData(w, http.StatusOK, map[string]any{"results": results})
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	var o sandbox.ListOptions
	for _, l := range r.URL.Query()["label"] {
		k, v, ok := strings.Cut(l, ":")
		if !ok || k == "" {
			s.fail(w, "", badRequest("Invalid label filter %q: use key:value", l))
			return
		}
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[k] = v
	}
	list, err := s.opts.Manager.List(r.Context(), o)
	if err != nil {
		s.fail(w, "", err)
		return
	}
	out := make([]SandboxInfo, len(list))
	for i, sb := range list {
		out[i] = s.info(sb)
	}
	writeData(w, http.StatusOK, out)
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Name        string            `json:"name"`
		Image       string            `json:"image"`
		VCPUs       int               `json:"vcpus"`
		MemoryMB    int               `json:"memory_mb"`
		Profile     string            `json:"profile"`
		Labels      map[string]string `json:"labels"`
		Description string            `json:"description"`
		// Network and its rules, as for /run; Ports publishes ports
		// ("8080:80").
		Network      networkField `json:"network"`
		AllowDomains []string     `json:"allow_domains"`
		BlockDomains []string     `json:"block_domains"`
		Ports        []string     `json:"ports"`
		// Secrets are vault keys bound to hosts (KEY:HOST,
		// KEY:HOST:HEADER; no inline value), kept by the sandbox across
		// restarts and restores.
		Secrets []string `json:"secrets"`
		// Backend is the backend the sandbox runs on (docker, podman,
		// gvisor); "" is the server's own.
		Backend string `json:"backend"`
	}
	if err := decode(w, r, &q, false); err != nil {
		s.fail(w, "", err)
		return
	}
	backend, err := s.backend(q.Backend)
	if err != nil {
		s.fail(w, q.Name, err)
		return
	}
	if len(q.Secrets) > maxSecrets {
		s.fail(w, q.Name, badRequest("secrets: %d bindings, more than %d", len(q.Secrets), maxSecrets))
		return
	}
	if err := sandbox.ValidateName(q.Name); err != nil {
		s.fail(w, q.Name, badRequest("%s", err.Error()))
		return
	}
	if q.VCPUs < 0 || q.MemoryMB < 0 {
		s.fail(w, q.Name, badRequest("vcpus and memory_mb must not be negative"))
		return
	}
	p := profileName(q.Profile)
	switch p {
	case "", "permissive", "moderate", "restrictive":
	default:
		s.fail(w, q.Name, badRequest("Invalid profile '%s'. Use: permissive, moderate, restrictive", q.Profile))
		return
	}
	spec, err := s.opts.Resolve(r.Context(), RunSpec{Name: q.Name, Image: q.Image, Profile: p, VCPUs: q.VCPUs, MemoryMB: q.MemoryMB,
		Network: q.Network.set, AllowDomains: q.AllowDomains, BlockDomains: q.BlockDomains, Ports: q.Ports, Secrets: q.Secrets, Backend: backend})
	if err != nil {
		s.fail(w, q.Name, badRequest("%s", err.Error()))
		return
	}
	info, _, err := s.opts.Manager.Create(r.Context(), sandbox.CreateRequest{Name: q.Name, Spec: spec, Labels: q.Labels,
		Description: q.Description, Start: true, Backend: backend})
	if err != nil {
		s.fail(w, q.Name, err)
		return
	}
	writeData(w, http.StatusCreated, s.info(info))
}

// name is the {name} wildcard, validated (400).
func (s *Server) name(w http.ResponseWriter, r *http.Request) (string, bool) {
	n := r.PathValue("name")
	if err := sandbox.ValidateName(n); err != nil {
		s.fail(w, n, badRequest("%s", err.Error()))
		return "", false
	}
	return n, true
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	info, err := s.opts.Manager.Get(r.Context(), n)
	if err != nil {
		s.fail(w, n, err)
		return
	}
	writeData(w, http.StatusOK, s.info(info))
}

func (s *Server) patchSandbox(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	var q struct {
		Labels      *map[string]string `json:"labels"`
		Description *string            `json:"description"`
	}
	if err := decode(w, r, &q, true); err != nil {
		s.fail(w, n, err)
		return
	}
	info, err := s.opts.Manager.Update(r.Context(), n, sandbox.Patch{Labels: q.Labels, Description: q.Description})
	if err != nil {
		s.fail(w, n, err)
		return
	}
	writeData(w, http.StatusOK, s.info(info))
}

// sandboxAction is a route that does one thing to the named sandbox and
// answers with done.
func (s *Server) sandboxAction(w http.ResponseWriter, r *http.Request, done string, do func(name string) error) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	if err := do(n); err != nil {
		s.fail(w, n, err)
		return
	}
	writeData(w, http.StatusOK, done)
}

func (s *Server) removeSandbox(w http.ResponseWriter, r *http.Request) {
	s.sandboxAction(w, r, "Sandbox removed", func(n string) error { return s.opts.Manager.Remove(r.Context(), n, true) })
}

func (s *Server) startSandbox(w http.ResponseWriter, r *http.Request) {
	s.sandboxAction(w, r, "Sandbox started", func(n string) error {
		_, err := s.opts.Manager.Start(r.Context(), n)
		return err
	})
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) {
	s.sandboxAction(w, r, "Sandbox stopped", func(n string) error {
		_, err := s.opts.Manager.Stop(r.Context(), n)
		return err
	})
}

func (s *Server) execSandbox(w http.ResponseWriter, r *http.Request) {
	n, req, ok := s.decodeExec(w, r)
	if !ok {
		return
	}
	// The request's context ends when its client goes: the command is
	// killed then, and the audit log says so.
	var out lockedBuffer
	res, err := s.opts.Manager.Exec(r.Context(), n, req, sandbox.Stdio{Stdout: &out, Stderr: &out}, nil)
	if err != nil {
		s.fail(w, n, err)
		return
	}
	text := sandbox.AppendNote(out.String(), res.OOMText())
	if res.TimedOut {
		s.fail(w, n, timeoutError(req.Timeout, text))
		return
	}
	if res.ExitCode != 0 {
		s.fail(w, n, exitError(res.ExitCode, text))
		return
	}
	writeData(w, http.StatusOK, map[string]string{"output": text})
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	p, err := filePath(strings.Split(r.PathValue("path"), "/"))
	if err != nil {
		s.fail(w, n, err)
		return
	}
	var buf bytes.Buffer
	if _, err := s.opts.Manager.ReadFile(r.Context(), n, p, &buf); err != nil {
		s.fail(w, n, err)
		return
	}
	b := buf.Bytes()
	content, enc := string(b), "utf8"
	if !utf8.Valid(b) {
		content, enc = base64.StdEncoding.EncodeToString(b), "base64"
	}
	writeData(w, http.StatusOK, map[string]any{"content": content, "encoding": enc, "size": len(b)})
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	p, err := filePath(strings.Split(r.PathValue("path"), "/"))
	if err != nil {
		s.fail(w, n, err)
		return
	}
	var q struct {
		Content  string `json:"content"`
		Encoding string `json:"encoding"`
	}
	if err := decode(w, r, &q, false); err != nil {
		s.fail(w, n, err)
		return
	}
	data := []byte(q.Content)
	if strings.EqualFold(q.Encoding, "base64") {
		if data, err = base64.StdEncoding.DecodeString(q.Content); err != nil {
			s.fail(w, n, badRequest("Invalid base64: %s", err.Error()))
			return
		}
	}
	written, err := s.opts.Manager.WriteFile(r.Context(), n, p, bytes.NewReader(data), 0o644)
	if err != nil {
		s.fail(w, n, err)
		return
	}
	writeData(w, http.StatusOK, fmt.Sprintf("Wrote %d bytes to %s", written, p))
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	p, err := filePath(strings.Split(r.PathValue("path"), "/"))
	if err != nil {
		s.fail(w, n, err)
		return
	}
	if err := s.opts.Manager.DeleteFile(r.Context(), n, p, false); err != nil {
		s.fail(w, n, err)
		return
	}
	writeData(w, http.StatusOK, "Deleted "+p)
}

func (s *Server) writeFiles(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	var q struct {
		Files map[string]string `json:"files"`
	}
	if err := decode(w, r, &q, false); err != nil {
		s.fail(w, n, err)
		return
	}
	files := make(map[string][]byte, len(q.Files))
	for p, c := range q.Files {
		cp, err := checkPath(p)
		if err != nil {
			s.fail(w, n, err)
			return
		}
		files[cp] = []byte(c)
	}
	if len(files) == 0 {
		s.fail(w, n, badRequest("files is required: an object of absolute path to content"))
		return
	}
	written, err := s.opts.Manager.WriteFiles(r.Context(), n, files)
	if err != nil {
		s.fail(w, n, err)
		return
	}
	writeData(w, http.StatusOK, fmt.Sprintf("Wrote %d file(s)", written))
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	entries, err := s.opts.Manager.Logs(r.Context(), n)
	if err != nil {
		s.fail(w, n, err)
		return
	}
	if entries == nil {
		entries = []audit.Entry{}
	}
	writeData(w, http.StatusOK, entries)
}

func (s *Server) extendSandbox(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	var q struct {
		By string `json:"by"`
	}
	if err := decode(w, r, &q, true); err != nil {
		s.fail(w, n, err)
		return
	}
	if q.By == "" {
		q.By = "1h"
	}
	d, err := config.ParseTTL(q.By)
	if err != nil {
		s.fail(w, n, badRequest("Invalid duration '%s': use e.g. 30m, 1h, 2d, 90s", q.By))
		return
	}
	info, err := s.opts.Manager.Extend(r.Context(), n, d)
	if err != nil {
		s.fail(w, n, err)
		return
	}
	var exp *string
	if info.ExpiresAt != nil {
		e := info.ExpiresAt.UTC().Format(time.RFC3339Nano)
		exp = &e
	}
	writeData(w, http.StatusOK, map[string]*string{"expires_at": exp})
}

func (s *Server) gc(w http.ResponseWriter, r *http.Request) {
	// The contract's answer names the sandboxes removed, nothing else.
	removed, err := s.opts.Manager.GCSandboxes(r.Context())
	if err != nil {
		s.fail(w, "", err)
		return
	}
	if removed == nil {
		removed = []string{}
	}
	writeData(w, http.StatusOK, map[string]any{"removed": removed, "count": len(removed)})
}
