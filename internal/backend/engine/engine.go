package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/config"
	image "github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Labels every container of this backend carries.
const (
	LabelManaged = "agentkernel.managed"
	LabelID      = "agentkernel.id"
)

// Labels of persistent sandboxes' and runs' containers (beside
// LabelManaged and LabelID).
const (
	// LabelOwner is "PID START" of the process that owns the container
	// (a run, a supervisor): gc removes it once that process is gone.
	LabelOwner = "agentkernel.owner"
	// LabelSandbox is a persistent sandbox's name.
	LabelSandbox = "agentkernel.sandbox"
)

// imageRepo is the repository the engine knows agentkernel's images
// under, each tagged with its manifest digest's hex.
const imageRepo = "agentkernel.local/image"

// Options configure a Backend.
type Options struct {
	// Host is the engine's API address (unix:///path, tcp://host:port,
	// or a bare socket path); "" means the engine's default (DefaultHost).
	Host string
	// Archive writes rootfs's image as a `docker save` archive whose one
	// image is tagged ref (the image store's exporter): what ImageLoad
	// is given when the engine lacks the image.
	Archive func(ctx context.Context, rootfs image.Rootfs, ref string, w io.Writer) error
	// Warn receives warnings, one line each, without a trailing newline.
	Warn func(string)
	// AllowDegraded is [security] allow_degraded: the protections a run
	// may go without, with a warning, where this backend cannot give them.
	AllowDegraded func() []string
	// DataDir is agentkernel's data directory: a run's copy-on-write
	// layers live under DataDir/engine while it runs ("": the system's
	// temporary directory).
	DataDir string
}

// removeTimeout bounds the removal of a run's container and volumes,
// whatever became of the run's context.
const removeTimeout = time.Minute

// Backend runs sandboxes as containers of a docker or podman engine.
type Backend struct {
	name string
	host string
	opts Options
	// bg counts the teardowns of pooled runs' containers (Drain).
	bg *sync.WaitGroup
}

// Docker is the backend "docker": the engine at opts.Host, DOCKER_HOST,
// else /var/run/docker.sock.
func Docker(opts Options) *Backend { return newBackend("docker", opts) }

// Podman is the backend "podman": the engine at opts.Host,
// CONTAINER_HOST, else podman's socket (/run/podman/podman.sock for
// root, $XDG_RUNTIME_DIR/podman/podman.sock for other users).
func Podman(opts Options) *Backend { return newBackend("podman", opts) }

func newBackend(name string, opts Options) *Backend {
	host := opts.Host
	if host == "" {
		host = DefaultHost(name, os.Getenv, os.Getuid())
	}
	if strings.HasPrefix(host, "/") {
		host = "unix://" + host
	}
	if opts.Warn == nil {
		opts.Warn = func(string) {}
	}
	return &Backend{name: name, host: host, opts: opts, bg: &sync.WaitGroup{}}
}

// DefaultHost is the address of engine's API when Options.Host is not
// set: the engine's variable (DOCKER_HOST, CONTAINER_HOST), else its
// usual socket for uid.
func DefaultHost(engine string, getenv func(string) string, uid int) string {
	if engine == "docker" {
		if h := getenv("DOCKER_HOST"); h != "" {
			return h
		}
		return "unix:///var/run/docker.sock"
	}
	if h := getenv("CONTAINER_HOST"); h != "" {
		return h
	}
	if uid == 0 {
		return "unix:///run/podman/podman.sock"
	}
	dir := getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = "/run/user/" + strconv.Itoa(uid)
	}
	return "unix://" + path.Join(dir, "podman", "podman.sock")
}

// Name is "docker" or "podman".
func (b *Backend) Name() string { return b.name }

// Host is the engine's API address this backend talks to.
func (b *Backend) Host() string { return b.host }

// startHint says how to get the engine's API answering.
func (b *Backend) startHint() string {
	if b.name == "docker" {
		return "start the docker daemon (systemctl start docker, or dockerd &) or point DOCKER_HOST at one"
	}
	if os.Getuid() == 0 {
		return "start podman's API service (systemctl start podman.socket, or podman system service --time=0 &) or point CONTAINER_HOST at one"
	}
	return "start podman's API service (systemctl --user start podman.socket, or podman system service --time=0 &) or point CONTAINER_HOST at one"
}

// engineError words a failed API call: an engine that does not answer
// names its address and how to start it.
func (b *Backend) engineError(what string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("backend %s: no engine answers at %s; %s", b.name, b.host, b.startHint())
	}
	return fmt.Errorf("backend %s: %s: %w", b.name, what, err)
}

// unsupported is a spec field this backend cannot give.
func (b *Backend) unsupported(format string, args ...any) error {
	return fmt.Errorf("backend %s: %s (use -B native): %w", b.name, fmt.Sprintf(format, args...), sandbox.ErrUnsupported)
}

// Check refuses, before the image is prepared, a run this backend cannot
// do (sandbox.Checker): what check refuses, without its warning.
func (b *Backend) Check(spec *sandbox.Spec) error { return b.check(spec, false) }

// check refuses what the engine cannot give the spec, and, with warn,
// warns once for what allow_degraded lets the run go without.
func (b *Backend) check(spec *sandbox.Spec, warn bool) error {
	switch {
	case spec.Rootfs.Host || image.IsHost(spec.Image):
		return b.unsupported("the host image runs on the native backend only")
	case spec.Network.Mode.Egress():
		return b.unsupported("no network egress yet, only --network none (network %s was asked for)", spec.Network.Mode)
	case len(spec.Network.Ports) > 0:
		return b.unsupported("no published ports yet")
	case spec.Keep:
		return b.unsupported("no kept writable layer")
	case spec.Secrets != nil:
		return b.unsupported("no secret injection (it needs network egress)")
	case spec.Resources.DiskMB > 0:
		return b.unsupported("no limit on the writable layer (disk_mb)")
	}
	if err := checkArgSize(spec.Args, spec.Env); err != nil {
		return fmt.Errorf("backend %s: %w", b.name, err)
	}
	for _, m := range spec.Mounts {
		switch {
		case m.Kind == sandbox.MountCopyOnWrite && !m.ReadOnly && !cowSource(m.Source):
			return b.unsupported("copy-on-write mount %s: the overlay's options cannot carry the path %q (',', ':', '\\' or a newline in it)", m.Dest, m.Source)
		case m.Kind != sandbox.MountBind && m.Kind != sandbox.MountTmpfs && m.Kind != sandbox.MountCopyOnWrite:
			return b.unsupported("mount %s of kind %q", m.Dest, m.Kind)
		case m.Kind != sandbox.MountTmpfs && !path.IsAbs(m.Source):
			return fmt.Errorf("backend %s: mount %s: source %q is not an absolute path", b.name, m.Dest, m.Source)
		case !path.IsAbs(m.Dest):
			return fmt.Errorf("backend %s: mount destination %q is not an absolute path", b.name, m.Dest)
		case strings.ContainsAny(m.Dest, ",:\n") || strings.ContainsAny(m.Source, ",\n"):
			return b.unsupported("mount %q: the engine's mount syntax cannot carry ',', ':' or newlines", m.Dest)
		}
	}
	if spec.Security.Landlock {
		var allowed []string
		if b.opts.AllowDegraded != nil {
			allowed = b.opts.AllowDegraded()
		}
		if !slices.Contains(allowed, config.DegradeLandlock) {
			return fmt.Errorf("backend %s: refusing to run without the Landlock filesystem fence: %s gives its containers none; use -B native, or let runs go without it: [security] allow_degraded = [%q] in your user config (~/.config/agentkernel/config.toml)",
				b.name, b.name, config.DegradeLandlock)
		}
		if warn {
			b.opts.Warn(b.landlockWarning())
		}
	}
	return nil
}

// landlockWarning is the warning of a run without Landlock.
func (b *Backend) landlockWarning() string {
	return fmt.Sprintf("backend %s: running without the Landlock filesystem fence, as [security] allow_degraded allows", b.name)
}

// securityOpts are the container's no_new_privs and seccomp options,
// and what removes the files they name once the container is created.
func (b *Backend) securityOpts(spec *sandbox.Spec) (opts []string, cleanup func(), err error) {
	cleanup = func() {}
	if spec.Security.NoNewPrivs {
		opts = append(opts, "no-new-privileges")
	}
	// A writable host directory's files are the invoking user's
	// (ownedBinds): no set-id file or file capability may be left there.
	guard := writableBind(spec)
	switch p := spec.Security.Seccomp; {
	case p == sandbox.SeccompUnconfined && !guard:
		opts = append(opts, "seccomp=unconfined")
	default:
		if p == "" {
			p = sandbox.SeccompDefault
		}
		var prof []byte
		var err error
		if p == sandbox.SeccompUnconfined {
			prof, err = native.SetidGuardJSON()
		} else {
			prof, err = native.SeccompProfileJSON(string(p), spec.Security.Capabilities, guard)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("backend %s: seccomp profile %s: %w", b.name, p, err)
		}
		if b.name == "podman" {
			// Podman's API reads the option as a file on its host (a
			// local socket's: the caller's), which it copies into the
			// container's configuration when it creates it.
			f, err := os.CreateTemp("", "agentkernel-seccomp-*.json")
			if err != nil {
				return nil, nil, fmt.Errorf("backend %s: seccomp profile: %w", b.name, err)
			}
			_, err = f.Write(prof)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			cleanup = func() { _ = os.Remove(f.Name()) }
			if err != nil {
				cleanup()
				return nil, nil, fmt.Errorf("backend %s: seccomp profile: %w", b.name, err)
			}
			opts = append(opts, "seccomp="+f.Name())
			return opts, cleanup, nil
		}
		opts = append(opts, "seccomp="+string(prof))
	}
	return opts, cleanup, nil
}

// validID reports whether id can be part of a container's name: a
// letter or digit, then up to 100 letters, digits, '_', '.' or '-'.
// (Checked by hand rather than by a regular expression compiled at
// start-up: that cost every agentkernel-full process a quarter of a
// millisecond, whatever its command.)
func validID(id string) bool {
	if len(id) == 0 || len(id) > 101 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// containerName is the container's name for spec: agentkernel-<id>
// where the id can be one.
func containerName(spec *sandbox.Spec) string {
	if validID(spec.ID) {
		return "agentkernel-" + spec.ID
	}
	return ""
}

// createOptions are the container spec asks for, of image ref.
func (b *Backend) createOptions(spec *sandbox.Spec, ref string, secOpts []string, stdin bool, volumes []mount.Mount) client.ContainerCreateOptions {
	cfg := &container.Config{
		Image:        ref,
		Hostname:     spec.Hostname,
		User:         spec.User,
		Env:          spec.Env,
		WorkingDir:   spec.Workdir,
		Tty:          spec.TTY,
		AttachStdin:  stdin,
		OpenStdin:    stdin,
		StdinOnce:    stdin,
		AttachStdout: true,
		AttachStderr: true,
		Labels:       map[string]string{LabelManaged: "true", LabelID: spec.ID},
	}
	if o := ownerLabel(); o != "" {
		cfg.Labels[LabelOwner] = o
	}
	if len(spec.Args) > 0 {
		// The command replaces the image's entrypoint and command.
		cfg.Entrypoint = spec.Args[:1]
		cfg.Cmd = append([]string{}, spec.Args[1:]...)
	}
	caps := spec.Security.Capabilities
	if caps == nil || (b.name == "podman" && !rootUser(spec.User, spec.Rootfs.Config.User)) {
		// Podman gives a user other than root the added capabilities in
		// its effective, permitted and ambient sets too (docker: in the
		// bounding set only), so that a command run as uid 1000 could
		// setuid(0). With no_new_privs (every profile) such a user can
		// never gain them otherwise: it gets none.
		caps = []string{}
	}
	hc := &container.HostConfig{
		NetworkMode:    "none",
		CapDrop:        []string{"ALL"},
		CapAdd:         caps,
		SecurityOpt:    secOpts,
		ReadonlyRootfs: spec.ReadOnlyRoot,
	}
	r := spec.Resources
	if r.MemoryMB > 0 {
		hc.Memory = r.MemoryMB << 20
		hc.MemorySwap = hc.Memory // no swap beyond the limit
	}
	if r.CPUPercent > 0 {
		hc.NanoCPUs = r.CPUPercent * 10_000_000
	}
	if r.PIDs > 0 {
		pids := r.PIDs
		hc.PidsLimit = &pids
	}
	for _, m := range spec.Mounts {
		switch m.Kind {
		case sandbox.MountBind, sandbox.MountCopyOnWrite:
			if m.Kind == sandbox.MountCopyOnWrite && !m.ReadOnly {
				continue // a volume of cowVolumes
			}
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Dest, ReadOnly: m.ReadOnly,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
		case sandbox.MountTmpfs:
			if hc.Tmpfs == nil {
				hc.Tmpfs = map[string]string{}
			}
			mode := "0755"
			if m.Dest == "/tmp" || m.Dest == "/var/tmp" {
				mode = "1777"
			}
			opt := "rw,nosuid,nodev,exec,mode=" + mode
			if m.ReadOnly {
				opt = "ro,nosuid,nodev,mode=" + mode
			}
			hc.Tmpfs[m.Dest] = opt
		}
	}
	hc.Mounts = append(hc.Mounts, volumes...)
	return client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: containerName(spec)}
}

// ensureImage makes sure the engine has spec's image and returns the
// tag it has it under: looked up by the image's digest first, loaded
// from the store only when missing.
func (b *Backend) ensureImage(ctx context.Context, cli *client.Client, spec *sandbox.Spec) (string, error) {
	hex, ok := strings.CutPrefix(spec.Rootfs.Digest, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("backend %s: image %s has no sha256 digest in the store", b.name, spec.Rootfs.Ref)
	}
	ref := imageRepo + ":" + hex
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", b.engineError("looking up image "+spec.Rootfs.Ref, err)
	}
	if b.opts.Archive == nil {
		return "", fmt.Errorf("backend %s: the engine lacks image %s and no image store is wired to load it", b.name, spec.Rootfs.Ref)
	}
	pr, pw := io.Pipe()
	archived := make(chan error, 1)
	go func() {
		err := b.opts.Archive(ctx, spec.Rootfs, ref, pw)
		pw.CloseWithError(err)
		archived <- err
	}()
	res, err := cli.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err != nil {
		pr.CloseWithError(err)
		<-archived
		return "", b.engineError("loading image "+spec.Rootfs.Ref, err)
	}
	loadErr := loadMessages(res)
	res.Close()
	pr.CloseWithError(errors.New("the engine stopped reading the image"))
	if err := <-archived; err != nil {
		return "", fmt.Errorf("backend %s: writing image %s for the engine: %w", b.name, spec.Rootfs.Ref, err)
	}
	if loadErr != nil {
		return "", fmt.Errorf("backend %s: the engine refused image %s: %w", b.name, spec.Rootfs.Ref, loadErr)
	}
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", b.engineError("image "+spec.Rootfs.Ref+" after loading it", err)
	}
	return ref, nil
}

// loadMessages reads ImageLoad's stream of JSON messages to its end and
// returns the first error one reports.
func loadMessages(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// forwarded are the signals a run passes on to its container.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Run runs spec.Args in a new container and removes it afterwards.
func (b *Backend) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	if err := b.check(spec, true); err != nil {
		return sandbox.Result{}, err
	}
	secOpts, cleanup, err := b.securityOpts(spec)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer cleanup()
	for _, m := range spec.Mounts {
		if m.Kind == sandbox.MountBind && m.Create {
			if err := os.MkdirAll(m.Source, 0o700); err != nil {
				return sandbox.Result{}, fmt.Errorf("backend %s: mount %s: %w", b.name, m.Dest, err)
			}
		}
	}
	owned, unmount, release, err := b.ownedBinds(spec, 0)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer release()
	defer unmount() // after the container's removal, below
	cli, err := client.New(client.WithHost(b.host), client.WithAPIVersionNegotiation())
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("backend %s: engine address %q: %w", b.name, b.host, err)
	}
	defer cli.Close()
	ref, err := b.ensureImage(ctx, cli, spec)
	if err != nil {
		return sandbox.Result{}, err
	}
	var volumes []mount.Mount
	if hasCow(spec) {
		dir, err := b.runDir(spec)
		if err != nil {
			return sandbox.Result{}, err
		}
		defer func() {
			if err := os.RemoveAll(dir); err != nil {
				b.opts.Warn(fmt.Sprintf("backend %s: removing %s: %v", b.name, dir, err))
			}
		}()
		var removeVolumes func()
		volumes, removeVolumes, err = b.cowVolumes(ctx, cli, spec, dir)
		if err != nil {
			return sandbox.Result{}, err
		}
		defer removeVolumes() // after the container's removal, below
	}
	stdin := stdio.Stdin != nil
	created, err := cli.ContainerCreate(ctx, b.createOptions(owned, ref, secOpts, stdin, volumes))
	cleanup()
	if err != nil {
		return sandbox.Result{}, b.engineError("creating the container", err)
	}
	id := created.ID
	defer b.remove(cli, id)
	return b.run(ctx, cli, id, spec, stdio)
}

// runDirPrefix starts the name of the directory of a run of spec: its
// container's name, so that gc finds it with the container.
func runDirPrefix(spec *sandbox.Spec) string {
	if n := containerName(spec); n != "" {
		return n + "."
	}
	return "agentkernel-run."
}

// writableBind says whether spec binds a host path writable.
func writableBind(spec *sandbox.Spec) bool {
	for _, m := range spec.Mounts {
		if m.Kind == sandbox.MountBind && !m.ReadOnly {
			return true
		}
	}
	return false
}

// hasCow says whether spec has a writable copy-on-write mount.
func hasCow(spec *sandbox.Spec) bool {
	for _, m := range spec.Mounts {
		if m.Kind == sandbox.MountCopyOnWrite && !m.ReadOnly {
			return true
		}
	}
	return false
}

// runDir makes a run's private directory, for its copy-on-write layers:
// under DataDir/engine, else the system's temporary directory.
func (b *Backend) runDir(spec *sandbox.Spec) (string, error) {
	base := os.TempDir()
	if b.opts.DataDir != "" {
		base = filepath.Join(b.opts.DataDir, "engine")
		if err := os.MkdirAll(base, 0o700); err != nil {
			return "", fmt.Errorf("backend %s: %w", b.name, err)
		}
	}
	dir, err := os.MkdirTemp(base, runDirPrefix(spec))
	if err != nil {
		return "", fmt.Errorf("backend %s: %w", b.name, err)
	}
	return dir, nil
}

// remove removes container id with whatever still runs in it, whatever
// became of the run's context.
func (b *Backend) remove(cli *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	if _, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		b.opts.Warn(fmt.Sprintf("backend %s: removing container %.12s: %v", b.name, id, err))
	}
}

// run attaches to the created container id, starts it, forwards
// signals, cancellation and the timeout, and waits for its end.
func (b *Backend) run(ctx context.Context, cli *client.Client, id string, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	stdout, stderr := stdio.Stdout, stdio.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	stdin := stdio.Stdin != nil
	att, err := cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdin: stdin, Stdout: true, Stderr: true})
	if err != nil {
		// Podman prepares the container when it attaches, and a command
		// that cannot start fails there without saying why: starting
		// it says.
		if _, serr := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); serr != nil {
			return sandbox.Result{}, b.startError(spec, serr)
		}
		return sandbox.Result{}, b.engineError("attaching to the container", err)
	}
	defer att.Close()
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		if spec.TTY {
			_, _ = io.Copy(stdout, att.Reader)
		} else {
			_, _ = stdcopy.StdCopy(stdout, stderr, att.Reader)
		}
	}()
	if stdin {
		go func() {
			_, _ = io.Copy(att.Conn, stdio.Stdin)
			_ = att.CloseWrite()
		}()
	}
	restore := b.terminal(spec, stdio)
	defer restore()
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	// Started whatever becomes of ctx meanwhile: a cancelled run's
	// container is killed below, once it runs.
	bg := context.WithoutCancel(ctx)
	// Asked for before the start, as docker's own client does: the
	// engine then reports the exit it sees next, without polling for it
	// afterwards (podman's wait for "not-running" polls the state).
	waitCtx, stopWaiting := context.WithCancel(bg)
	defer stopWaiting()
	wait := cli.ContainerWait(waitCtx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	died := b.dieEvents(waitCtx, cli, id)
	if _, err := cli.ContainerStart(bg, id, client.ContainerStartOptions{}); err != nil {
		return sandbox.Result{}, b.startError(spec, err)
	}
	b.resize(cli, id, spec, stdio)
	var timeout <-chan time.Time
	if spec.Resources.Timeout > 0 {
		t := time.NewTimer(spec.Resources.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	done := ctx.Done()
	var res sandbox.Result
	killed := false
	kill := func(sig string) {
		if _, err := cli.ContainerKill(bg, id, client.ContainerKillOptions{Signal: sig}); err == nil && sig == "KILL" {
			killed = true
		}
	}
	finish := func(code int, oomKilled *bool) (sandbox.Result, error) {
		res.ExitCode = code
		select {
		case <-outDone:
		case <-time.After(5 * time.Second):
			// The engine keeps the stream open: what was written
			// has arrived.
			att.Close()
			<-outDone
		}
		if killed && res.ExitCode > 128 {
			res.Signal = res.ExitCode - 128
		}
		if res.ExitCode == 137 && spec.Resources.MemoryMB > 0 {
			if oomKilled == nil {
				if in, err := cli.ContainerInspect(bg, id, client.ContainerInspectOptions{}); err == nil && in.Container.State != nil {
					oomKilled = &in.Container.State.OOMKilled
				}
			}
			if oomKilled != nil && *oomKilled {
				res.OOMKills, res.MemoryMB, res.Signal = 1, spec.Resources.MemoryMB, 9
			}
		}
		return res, nil
	}
	for {
		select {
		case code := <-died:
			return finish(code, nil)
		case w := <-wait.Result:
			if w.Error != nil && w.Error.Message != "" {
				return res, fmt.Errorf("backend %s: waiting for the container: %s", b.name, w.Error.Message)
			}
			return finish(int(w.StatusCode), nil)
		case err := <-wait.Error:
			return res, b.engineError("waiting for the container", err)
		case <-done:
			done = nil
			kill("KILL")
		case <-timeout:
			res.TimedOut = true
			kill("KILL")
		case s := <-sigs:
			if n, ok := s.(syscall.Signal); ok {
				kill(strconv.Itoa(int(n)))
			}
		}
	}
}

// dieEvents is, for podman, the exit code of container id's "died"
// event, which podman's event stream gives sooner than its wait answers
// (a traced run: the event some 40 ms after the output's end, the wait
// 100 to 250 ms after it, the state "exited" 0.5 to 0.8 s after it); nil
// (never ready) for docker, whose wait is as prompt.
func (b *Backend) dieEvents(ctx context.Context, cli *client.Client, id string) <-chan int {
	if b.name != "podman" {
		return nil
	}
	out := make(chan int, 1)
	ev := cli.Events(ctx, client.EventsListOptions{Filters: client.Filters{}.Add("container", id).Add("type", "container").Add("event", "die")})
	go func() {
		for {
			select {
			case m := <-ev.Messages:
				if m.Action != events.ActionDie || m.Actor.ID != id {
					continue
				}
				code, err := strconv.Atoi(m.Actor.Attributes["containerExitCode"])
				if err != nil {
					code, err = strconv.Atoi(m.Actor.Attributes["exitCode"])
				}
				if err == nil {
					out <- code
				}
				return
			case <-ev.Err:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// startError maps a container that did not start to the run's errors:
// a command that is not there (127) or cannot be run (126), as docker's
// own client does.
func (b *Backend) startError(spec *sandbox.Spec, err error) error {
	msg := err.Error()
	cmd := ""
	if len(spec.Args) > 0 {
		cmd = spec.Args[0]
	}
	switch {
	case client.IsErrConnectionFailed(err):
		return b.engineError("", err)
	case strings.Contains(msg, "permission denied"):
		return fmt.Errorf("%s: %w (%s)", cmd, sandbox.ErrCannotInvoke, msg)
	case strings.Contains(msg, "not found") || strings.Contains(msg, "no such file or directory"):
		return fmt.Errorf("%s: %w (%s)", cmd, sandbox.ErrNotFound, msg)
	}
	return fmt.Errorf("backend %s: starting the container: %w", b.name, err)
}

// LoopbackOnly: the sandboxes have loopback only, no network egress yet
// (sandbox.LoopbackOnly).
func (b *Backend) LoopbackOnly() bool { return true }

// Bounds on what execve takes, whatever the container's stack limit:
// one string at most MAX_ARG_STRLEN (32 pages), all of them with their
// pointers at most a quarter of the largest stack the kernel counts
// (6 MiB).
const (
	maxArgStrlen = 32 * 4096
	maxArgTotal  = 6 << 20
)

// checkArgSize refuses (sandbox.ErrCannotInvoke, exit 126) an argv and
// environment that no execve in the container could take, before the
// engine is handed them: the engine would carry megabytes through its
// API and containerd only to fail there, slowly.
func checkArgSize(args, env []string) error {
	var total int
	for _, list := range [][]string{args, env} {
		for _, s := range list {
			if len(s)+1 > maxArgStrlen {
				return fmt.Errorf("one argument or variable is %d bytes, over the kernel's %d (E2BIG): %w", len(s), maxArgStrlen, sandbox.ErrCannotInvoke)
			}
			total += len(s) + 1 + 8
		}
		total += 8
	}
	if total > maxArgTotal {
		return fmt.Errorf("%d bytes of arguments and environment, over the %d any execve takes (E2BIG): %w", total, maxArgTotal, sandbox.ErrCannotInvoke)
	}
	return nil
}

// rootUser: the container's user is root, user (a spec's "user[:group]")
// or, when it is "", the image's.
func rootUser(user, imageUser string) bool {
	if user == "" {
		user = imageUser
	}
	name, _, _ := strings.Cut(user, ":")
	return name == "" || name == "0" || name == "root"
}
