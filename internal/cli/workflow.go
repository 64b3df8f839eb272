package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/workflow"
)

// workflowRun is one job's or step's run, resolved and its image ready.
type workflowRun struct {
	a       *App
	mgr     *sandbox.Manager
	backend string
	spec    *sandbox.Spec
	// audit: the entry's sandbox field and action.
	label, action string
}

// prepareWorkflowRun resolves the spec of a run of args with ov, as
// 'run' would in the current directory, and ensures its image (pulled
// when missing), so that a bad image or profile fails before any job or
// step starts.
func (a *App) prepareWorkflowRun(ctx context.Context, mgr *sandbox.Manager, backend string, ov policy.Overrides, args []string) (*sandbox.Spec, error) {
	spec, err := a.ResolveRunSpec(&ov, args)
	if err != nil {
		return nil, err
	}
	if len(spec.Rootfs.Layers) == 0 && !spec.Rootfs.Host {
		if err := mgr.PrepareRootfs(ctx, spec); err != nil {
			return nil, imageError(err)
		}
	}
	return spec, nil
}

// run runs the prepared spec once: the command's exit code (124 when
// its timeout ended it).
func (w *workflowRun) run(ctx context.Context, stdout, stderr io.Writer) (int, error) {
	start := time.Now()
	res, err := w.mgr.Run(ctx, w.backend, w.spec, sandbox.Stdio{Stdout: stdout, Stderr: stderr})
	code := res.ExitCode
	if res.TimedOut {
		code = 124
	}
	if err == nil && ctx.Err() != nil {
		err = errors.New("interrupted")
	}
	e := audit.Entry{Sandbox: w.label, Action: w.action, Command: w.spec.Args, DurationMS: float64(time.Since(start).Microseconds()) / 1000,
		Who: runcli.Who("cli"), Details: "image " + w.spec.Image}
	if err != nil {
		e.Error = err.Error()
	} else {
		e.ExitCode = &code
	}
	if aerr := audit.New(w.a.DataDir).Append(e); aerr != nil {
		w.a.Warnf("audit log: %v", aerr)
	}
	return code, err
}

// status is where progress lines go: stderr, nowhere with --quiet.
func (a *App) status() io.Writer {
	if a.Quiet {
		return io.Discard
	}
	return a.Stderr
}

// prefixed is err with where it happened in front of its words, keeping
// its exit status and hint.
func prefixed(where string, err error) error {
	var ee *ExitError
	if errors.As(err, &ee) && ee.Err != nil {
		return &ExitError{Code: ee.Code, Err: fmt.Errorf("%s: %w", where, ee.Err), Hint: ee.Hint}
	}
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("%s: %w", where, err)}
}

// interruptible is ctx, also ended by SIGINT or SIGTERM.
func interruptible(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
}

func validImageRef(s string) bool {
	_, err := image.NormalizeRef(s)
	return err == nil
}

func newParallelCmd(a *App) *cobra.Command {
	var (
		jobs    []string
		limit   int
		backend string
	)
	c := &cobra.Command{
		Use:   "parallel --job NAME:IMAGE[:TAG]:COMMAND ...",
		Short: "Run several commands at once, each in its own sandbox",
		Long: `Run jobs at once, each a fresh sandbox as 'run' makes it (in the current
directory, with its configuration and the default profile), at most -j
together (default: the number of CPUs). A job is NAME:IMAGE:COMMAND or
NAME:IMAGE:TAG:COMMAND; an image without a tag is IMAGE:latest; the command
is split on white space (no shell quoting). Every image is made ready
(pulled if needed) before any job starts: an unknown image fails the whole
command and runs nothing.

On a terminal each job has a status line, updated as it runs; otherwise a
line is printed as each job ends. Each job's output (stdout and stderr) is
printed when it ends, each line prefixed with [NAME]; a job's output
beyond 8 MiB is dropped, and the block says how much.

Ctrl-C (or SIGTERM) stops every job and starts no more. Exit status: 0 when
every job passed ("All jobs passed (X.Xs wall time)"), 1 when one failed
("Some jobs failed (X.Xs wall time)"), 125 for a bad job or image.`,
		Example: `  agentkernel parallel --job "lint:node:npx eslint ." --job "test:python:3.12:pytest -q"
  agentkernel parallel -j 4 --job "a:alpine:3.20:make a" --job "b:alpine:3.20:make b"
  agentkernel parallel --job "unit:golang:1.23-alpine:go test ./..." --job "vet:golang:1.23-alpine:go vet ./..."`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(jobs) == 0 {
				return usageError("parallel: give at least one --job NAME:IMAGE:COMMAND")
			}
			if limit < 0 {
				return usageError("-j must be 1 or more")
			}
			if limit == 0 {
				limit = runtime.NumCPU()
			}
			specs := make([]workflow.JobSpec, len(jobs))
			seen := map[string]bool{}
			for i, j := range jobs {
				s, err := workflow.ParseJobSpec(j, validImageRef)
				if err != nil {
					return usageError("%v", err)
				}
				if seen[s.Name] {
					return usageError("Duplicate job name: '%s'", s.Name)
				}
				seen[s.Name] = true
				specs[i] = s
			}
			ctx, stop, mgr, err := a.workflowManager(cmd, backend)
			if err != nil {
				return err
			}
			defer stop()
			wjobs := make([]workflow.Job, len(specs))
			for i, s := range specs {
				ov := policy.Overrides{Image: s.Image, Set: map[string]bool{"image": true}}
				spec, err := a.prepareWorkflowRun(ctx, mgr, backend, ov, s.Args)
				if err != nil {
					return prefixed(fmt.Sprintf("job '%s'", s.Name), err)
				}
				w := &workflowRun{a: a, mgr: mgr, backend: backend, spec: spec, label: "parallel-" + s.Name, action: audit.ActionParallelJob}
				wjobs[i] = workflow.Job{Name: s.Name, Run: w.run}
			}
			results, wall := workflow.Parallel(ctx, wjobs, workflow.ParallelOptions{Limit: limit, Stdout: a.Stdout, Status: a.status(), Live: !a.Quiet && isTerminal(a.Stderr)})
			for _, r := range results {
				if !r.OK() {
					return &ExitError{Code: 1, Err: fmt.Errorf("Some jobs failed (%.1fs wall time)", wall.Seconds())}
				}
			}
			a.Infof("All jobs passed (%.1fs wall time)", wall.Seconds())
			return nil
		},
	}
	c.Flags().StringArrayVar(&jobs, "job", nil, "a job: NAME:IMAGE:COMMAND or NAME:IMAGE:TAG:COMMAND (repeatable)")
	c.Flags().IntVarP(&limit, "jobs", "j", 0, "run at most this many jobs at once (default: the number of CPUs)")
	c.Flags().StringVarP(&backend, "backend", "B", "", "sandbox backend")
	return c
}

func newPipelineCmd(a *App) *cobra.Command {
	var backend string
	c := &cobra.Command{
		Use:   "pipeline FILE",
		Short: "Run the steps of a pipeline file in order, each in its own sandbox",
		Long: `Run the [[step]] tables of a TOML file in order, each in a fresh sandbox
as 'run' makes it in the current directory:

  [[step]]
  name    = "build"          # required, unique; no '/', '\' or '..'
  image   = "golang:1.23-alpine"
  command = "go build -o /out/app ."   # split on white space, no shell quoting
  output  = "/out"           # its regular files go to the next step's input
  [[step]]
  name    = "test"
  image   = "alpine:3.20"
  command = "/in/app --selftest"
  input   = "/in"            # the previous step's output files land here
  profile = "restrictive"    # optional: the security profile
  memory  = "1g"             # optional, default 512m
  cpus    = 2                # optional, default 1
  timeout = "5m"             # optional: exit status 124 past it

Only regular files directly in the output directory pass on (not
subdirectories, links or devices). Every image is made ready before the
first step starts. A step that fails stops the pipeline: "Pipeline failed
at step 'NAME' (i/N)". Progress lines ("  [i/N] NAME done (X.Xs)") go to
stderr, the steps' output to stdout and stderr as they run. The
directories that carry files between steps are removed at the end, also
on failure or Ctrl-C. Exit status: 0 when every step passed, 1 when a step
failed, 125 for a bad file or image (errors name FILE:LINE).`,
		Example: `  agentkernel pipeline ci.toml
  agentkernel pipeline -B native build.toml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			steps, err := workflow.ParsePipeline(args[0], data)
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			ctx, stop, mgr, err := a.workflowManager(cmd, backend)
			if err != nil {
				return err
			}
			defer stop()
			prefix := strings.TrimSuffix(filepath.Base(args[0]), filepath.Ext(args[0]))
			psteps := make([]workflow.PipelineStep, len(steps))
			for i, s := range steps {
				ov := stepOverrides(s)
				// Placeholders at input and output: the spec is resolved
				// once, here, the real directories bound per run.
				spec, err := a.prepareWorkflowRun(ctx, mgr, backend, ov, s.Args)
				if err != nil {
					return prefixed(fmt.Sprintf("%s:%d: step '%s'", args[0], s.Line, s.Name), err)
				}
				w := &workflowRun{a: a, mgr: mgr, backend: backend, spec: spec, label: prefix + "-" + s.Name, action: audit.ActionPipelineStep}
				step := s
				psteps[i] = workflow.PipelineStep{Step: s, Run: func(ctx context.Context, inDir, outDir string, stdout, stderr io.Writer) (int, error) {
					ov := stepOverrides(step)
					for _, b := range [][2]string{{inDir, step.Input}, {outDir, step.Output}} {
						if b[0] != "" {
							ov.Volumes = append(ov.Volumes, b[0]+":"+b[1])
						}
					}
					spec, err := a.ResolveRunSpec(&ov, step.Args)
					if err != nil {
						return 0, err
					}
					spec.Rootfs = w.spec.Rootfs
					run := *w
					run.spec = spec
					return run.run(ctx, stdout, stderr)
				}}
			}
			err = workflow.RunPipeline(ctx, psteps, workflow.PipelineOptions{Stdout: a.Stdout, Stderr: a.Stderr, Status: a.status()})
			var se *workflow.StepError
			if errors.As(err, &se) {
				code := 1
				if se.Err != nil {
					code = ExitAgentkernel
				}
				return &ExitError{Code: code, Err: fmt.Errorf("Pipeline failed at step '%s' (%d/%d)", se.Name, se.Index, se.Total)}
			}
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&backend, "backend", "B", "", "sandbox backend")
	return c
}

// stepOverrides are a pipeline step's run flags: its image, profile and
// limits (1 CPU and 512m unless it sets them).
func stepOverrides(s workflow.Step) policy.Overrides {
	ov := policy.Overrides{Image: s.Image, Memory: workflow.DefaultMemory, CPUs: workflow.DefaultCPUs,
		Set: map[string]bool{"image": true, "memory": true, "cpus": true}}
	if s.Memory != "" {
		ov.Memory = s.Memory
	}
	if s.CPUs > 0 {
		ov.CPUs = s.CPUs
	}
	if s.Profile != "" {
		ov.Profile = s.Profile
		ov.Set["profile"] = true
	}
	if s.TimeoutD > 0 {
		ov.Timeout = s.TimeoutD
		ov.Set["timeout"] = true
	}
	return ov
}

// workflowManager readies what parallel and pipeline run their sandboxes
// with: logging, a context that ^C and SIGTERM cancel (stop releases it),
// and the Manager, whose backend must exist. Each warning is printed
// once, not once per job or step.
func (a *App) workflowManager(cmd *cobra.Command, backend string) (context.Context, func(), *sandbox.Manager, error) {
	a.WarnOnce()
	if err := a.SetupLogging(); err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := interruptible(cmdContext(cmd))
	mgr, err := a.Manager()
	if err == nil {
		_, err = mgr.Backend(backend)
		if err != nil {
			err = &ExitError{Code: ExitAgentkernel, Err: err}
		}
	}
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ctx, stop, mgr, nil
}
