package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/engine"
	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/benchmark"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// runCaser times one case of a backend's runs, once per call.
type runCaser struct {
	name, command string
	// why is set when the case cannot be timed here.
	why string
	// once times one run; after (untimed) lets what it left settle.
	once  func(ctx context.Context) (time.Duration, error)
	after func()
	times []time.Duration
}

// benchmarkRuns times one-off runs of /bin/true on backend name: cold
// (Manager.Run), pooled (a sandbox prepared ahead, untimed, then its
// Run), an exec round trip into a running persistent sandbox, and the
// tool underneath where it is installed, interleaved iteration by
// iteration (warm-ups first, not counted). Each run's teardown is waited
// for (Manager.Drain) outside the timings.
func (a *App) benchmarkRuns(ctx context.Context, m *sandbox.Manager, name string, o *benchmarkOptions) benchmark.BackendRuns {
	fail := func(err error) benchmark.BackendRuns {
		return benchmark.BackendRuns{Backend: name, Reason: oneLine(err), Cases: []benchmark.RunCase{}, Ratios: map[string]float64{}}
	}
	be, err := m.Backend(name)
	if err != nil {
		return fail(err)
	}
	ov := policy.Overrides{Image: o.image, Memory: "256m", CPUs: 1, NoNetwork: true, Profile: "restrictive",
		Set: map[string]bool{"image": true, "memory": true, "cpus": true, "no-network": true, "profile": true}}
	backend := name
	if backend == "native" {
		backend = ""
	}
	spec, err := a.ResolveRunSpecFor(&ov, []string{"/bin/true"}, backend)
	if err != nil {
		return fail(err)
	}
	if c, ok := be.(sandbox.Checker); ok {
		if err := c.Check(spec); err != nil {
			return fail(err)
		}
	}
	if err := m.PrepareRootfs(ctx, spec); err != nil {
		return fail(err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fail(err)
	}
	defer devnull.Close()
	check := func(res sandbox.Result, err error, out *bytes.Buffer) error {
		if err != nil {
			return err
		}
		if res.ExitCode != 0 || res.TimedOut {
			return fmt.Errorf("/bin/true: exit %d: %s", res.ExitCode, strings.TrimSpace(out.String()))
		}
		return nil
	}
	run := func(ctx context.Context) (time.Duration, error) {
		s := *spec
		var out bytes.Buffer
		start := time.Now()
		res, err := m.Run(ctx, name, &s, sandbox.Stdio{Stdin: devnull, Stdout: &out, Stderr: &out})
		return time.Since(start), check(res, err, &out)
	}
	cases := []*runCaser{{name: benchmark.CaseCold, command: "run -B " + name + " /bin/true", once: run, after: m.Drain}}
	pooled := &runCaser{name: benchmark.CasePooled, command: "run -B " + name + " /bin/true, sandbox prepared ahead", after: m.Drain}
	if _, ok := be.(sandbox.Preparer); !ok {
		pooled.why = "the backend has no warm pools"
	}
	pooled.once = func(ctx context.Context) (time.Duration, error) {
		s := *spec
		p, err := m.Prepare(ctx, name, &s)
		if err != nil {
			return 0, err
		}
		var out bytes.Buffer
		start := time.Now()
		res, err := p.Run(ctx, []string{"/bin/true"}, sandbox.Stdio{Stdin: devnull, Stdout: &out, Stderr: &out}, nil)
		return time.Since(start), check(res, err, &out)
	}
	cases = append(cases, pooled)
	// The exec round trip, into one persistent sandbox kept for it.
	execName := "agentkernel-bench-" + name + "-exec"
	exc := &runCaser{name: benchmark.CaseExec, command: "exec " + execName + " /bin/true"}
	if err := a.benchmarkExecSandbox(ctx, m, execName, name, o); err != nil {
		exc.why = oneLine(err)
	} else {
		defer func() { _ = m.Remove(context.WithoutCancel(ctx), execName, true) }()
		exc.once = func(ctx context.Context) (time.Duration, error) {
			var out bytes.Buffer
			start := time.Now()
			res, err := m.Exec(ctx, execName, sandbox.ExecRequest{Args: []string{"/bin/true"}}, sandbox.Stdio{Stdin: devnull, Stdout: &out, Stderr: &out}, nil)
			return time.Since(start), check(res, err, &out)
		}
	}
	cases = append(cases, exc)
	tool, cleanup := a.benchmarkTool(ctx, name, be, spec)
	defer cleanup()
	cases = append(cases, tool)
	for i := 0; i < o.warmup+o.iterations; i++ {
		for _, c := range cases {
			if c.why != "" || c.once == nil {
				continue
			}
			d, err := c.once(ctx)
			if c.after != nil {
				c.after()
			}
			if err != nil {
				if ctx.Err() != nil {
					return fail(ctx.Err())
				}
				c.why, c.times = oneLine(err), nil
				continue
			}
			if i >= o.warmup {
				c.times = append(c.times, d)
			}
		}
	}
	var out []benchmark.RunCase
	for _, c := range cases {
		rc := benchmark.Case(c.name, c.command, c.times)
		if c.why != "" {
			rc = benchmark.RunCase{Case: c.name, Command: c.command, Unavailable: c.why}
		}
		out = append(out, rc)
	}
	return benchmark.Runs(name, out)
}

// benchmarkExecSandbox creates and starts the persistent sandbox the
// exec case runs in (one left by an earlier benchmark removed first).
func (a *App) benchmarkExecSandbox(ctx context.Context, m *sandbox.Manager, sb, backend string, o *benchmarkOptions) error {
	if _, err := m.Get(ctx, sb); err == nil {
		if err := m.Remove(ctx, sb, true); err != nil {
			return err
		}
	}
	co := &createOptions{backend: backend, overrides: policy.Overrides{Image: o.image, Memory: "256m", CPUs: 1, NoNetwork: true,
		Set: map[string]bool{"image": true, "memory": true, "cpus": true, "no-network": true}}}
	_, req, err := a.resolveCreate(sb, co)
	if err != nil {
		return err
	}
	if _, _, err := m.Create(ctx, sandbox.CreateRequest{Name: sb, Spec: req.Spec, Start: true, Backend: backend}); err != nil {
		_ = m.Remove(context.WithoutCancel(ctx), sb, true)
		return err
	}
	return nil
}

// benchmarkTool is the case of the tool underneath backend name running
// /bin/true of the same image by itself: docker run or podman run
// (--rm, no network, the same memory and CPU limits) of the image the
// backend loaded into the engine, runsc run of a bundle whose root is
// the image's layers; native has none. cleanup undoes what it set up.
func (a *App) benchmarkTool(ctx context.Context, name string, be sandbox.Backend, spec *sandbox.Spec) (*runCaser, func()) {
	c := &runCaser{name: benchmark.CaseTool}
	none := func() {}
	timed := func(argv []string) func(context.Context) (time.Duration, error) {
		return func(ctx context.Context) (time.Duration, error) {
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			d := time.Since(start)
			if err != nil {
				return d, fmt.Errorf("%s: %v: %s", argv[0], err, strings.TrimSpace(out.String()))
			}
			return d, nil
		}
	}
	switch name {
	case "docker", "podman":
		eb, ok := be.(*engine.Backend)
		if !ok {
			c.command, c.why = name+" run", "not an engine backend"
			return c, none
		}
		bin, err := exec.LookPath(name)
		if err != nil {
			c.command, c.why = name+" run", name+"'s command line is not installed"
			return c, none
		}
		img := "agentkernel.local/image:" + strings.TrimPrefix(spec.Rootfs.Digest, "sha256:")
		argv := []string{bin, "-H", eb.Host()}
		if name == "podman" {
			argv = []string{bin, "--remote", "--url", eb.Host()}
		}
		argv = append(argv, "run", "--rm", "--network", "none", "--memory", "256m", "--cpus", "1", img, "/bin/true")
		c.command = strings.Join(append([]string{name}, argv[1:]...), " ")
		c.once = timed(argv)
		return c, none
	case "gvisor":
		c.command = "runsc run (a bundle of the image's layers)"
		runsc := os.Getenv(gvisor.RunscEnv)
		if runsc == "" {
			if p := gvisor.RunscCachePath(); p != "" {
				if _, err := os.Stat(p); err == nil {
					runsc = p
				}
			}
		}
		if runsc == "" {
			p, err := exec.LookPath("runsc")
			if err != nil {
				c.why = "runsc not found"
				return c, none
			}
			runsc = p
		}
		dir, cleanup, err := runscBenchBundle(ctx, a.DataDir, runsc, spec)
		if err != nil {
			c.why = oneLine(err)
			return c, none
		}
		n := 0
		c.command = "runsc --network=none run --bundle BUNDLE ID"
		c.once = func(ctx context.Context) (time.Duration, error) {
			n++
			return timed([]string{runsc, "--root", filepath.Join(dir, "state"), "--network=none", "run", "--bundle", filepath.Join(dir, "bundle"),
				fmt.Sprintf("agentkernel-bench-%d-%d", os.Getpid(), n)})(ctx)
		}
		return c, cleanup
	}
	c.command, c.why = "-", "no tool underneath"
	return c, none
}

// runscBenchBundle makes an OCI bundle for `runsc run` of /bin/true in a
// fresh directory under the data directory: runsc spec's config, its
// root the image's layers (a read-only overlay when there are several).
func runscBenchBundle(ctx context.Context, dataDir, runsc string, spec *sandbox.Spec) (string, func(), error) {
	layers := slices.Clone(spec.Rootfs.Layers)
	if len(layers) == 0 {
		return "", nil, errors.New("the image has no layers to make a bundle of")
	}
	dir, err := os.MkdirTemp(dataDir, "bench-runsc-")
	if err != nil {
		return "", nil, err
	}
	root := layers[0]
	mounted := ""
	cleanup := func() {
		if mounted != "" {
			_ = unix.Unmount(mounted, unix.MNT_DETACH)
		}
		// runsc leaves mounts in its state directory (the null network
		// namespace of --network=none).
		unmountUnder(dir)
		_ = os.RemoveAll(dir)
	}
	for _, d := range []string{"bundle", "state", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			cleanup()
			return "", nil, err
		}
	}
	if len(layers) > 1 {
		slices.Reverse(layers) // overlayfs lists the top layer first
		root = filepath.Join(dir, "root")
		if err := unix.Mount("overlay", root, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(layers, ":")); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("mounting the image's layers: %w", err)
		}
		mounted = root
	}
	cmd := exec.CommandContext(ctx, runsc, "spec", "--", "/bin/true")
	cmd.Dir = filepath.Join(dir, "bundle")
	if out, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("runsc spec: %v: %s", err, strings.TrimSpace(string(out)))
	}
	cfgPath := filepath.Join(dir, "bundle", "config.json")
	raw, err := os.ReadFile(cfgPath)
	var cfg map[string]any
	if err == nil {
		err = json.Unmarshal(raw, &cfg)
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("runsc spec's config.json: %w", err)
	}
	cfg["root"] = map[string]any{"path": root, "readonly": true}
	if raw, err = json.Marshal(cfg); err == nil {
		err = os.WriteFile(cfgPath, raw, 0o600)
	}
	if err != nil {
		cleanup()
		return "", nil, err
	}
	return dir, cleanup, nil
}

// unmountUnder detaches every mount below dir, deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}
