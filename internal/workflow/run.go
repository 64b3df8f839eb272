package workflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Runner runs one job or step to its end: its exit code, or an error
// when it could not be run (agentkernel's failure, ctx's end).
type Runner func(ctx context.Context, stdout, stderr io.Writer) (int, error)

// Job is one job of Parallel.
type Job struct {
	Name string
	Run  Runner
}

// JobResult is how a job ended.
type JobResult struct {
	Name     string
	ExitCode int
	Err      error
	Took     time.Duration
	// Started is false for a job ctx's end kept from starting.
	Started bool
}

// OK reports whether the job succeeded.
func (r JobResult) OK() bool { return r.Started && r.Err == nil && r.ExitCode == 0 }

func (r JobResult) why() string {
	switch {
	case !r.Started:
		return "not started"
	case r.Err != nil:
		return r.Err.Error()
	}
	return fmt.Sprintf("exit status %d", r.ExitCode)
}

// ParallelOptions are Parallel's streams and settings.
type ParallelOptions struct {
	// Limit is how many jobs run at once (<= 0: all).
	Limit int
	// Stdout takes each job's output, as one block of lines prefixed
	// with "[name] " once the job has ended; Status the progress lines.
	Stdout, Status io.Writer
	// Live redraws one status line per job in place (Status is a
	// terminal); else each job's line is printed once, when it ends.
	Live bool
	// MaxOutput bounds what is kept of one job's output (0: 8 MiB); the
	// rest is dropped, and the block says how much.
	MaxOutput int
}

// Parallel runs jobs at once, at most o.Limit together, prints
// "Running N jobs in parallel...", then "  <name> done (X.Xs)" or
// "  <name> FAILED (X.Xs): why" for each as it ends, and returns the
// results in jobs' order and the wall time. ctx's end stops every job
// and starts no more.
func Parallel(ctx context.Context, jobs []Job, o ParallelOptions) ([]JobResult, time.Duration) {
	if o.MaxOutput <= 0 {
		o.MaxOutput = 8 << 20
	}
	limit := o.Limit
	if limit <= 0 || limit > len(jobs) {
		limit = len(jobs)
	}
	d := &display{w: o.Status, out: o.Stdout, live: o.Live, names: make([]string, len(jobs)), state: make([]string, len(jobs)), since: make([]time.Time, len(jobs))}
	width := 0
	for i, j := range jobs {
		d.names[i] = j.Name
		d.state[i] = "waiting"
		width = max(width, len(j.Name))
	}
	d.width = width
	fmt.Fprintf(o.Status, "Running %d jobs in parallel...\n", len(jobs))
	start := time.Now()
	d.start()
	results := make([]JobResult, len(jobs))
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i, j := range jobs {
		results[i] = JobResult{Name: j.Name}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			d.finish(i, "cancelled", nil)
			continue
		}
		wg.Add(1)
		d.set(i, "running")
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			buf := &capped{max: o.MaxOutput}
			t0 := time.Now()
			code, err := j.Run(ctx, buf, buf)
			r := JobResult{Name: j.Name, ExitCode: code, Err: err, Took: time.Since(t0), Started: true}
			results[i] = r
			line := fmt.Sprintf("done (%.1fs)", r.Took.Seconds())
			if !r.OK() {
				line = fmt.Sprintf("FAILED (%.1fs): %s", r.Took.Seconds(), r.why())
			}
			d.finish(i, line, buf)
		}()
	}
	wg.Wait()
	d.stop()
	return results, time.Since(start)
}

// display prints Parallel's status lines: live, one line per job
// redrawn in place, or plain, one line per job as it ends.
type display struct {
	w, out io.Writer
	live   bool
	width  int

	mu    sync.Mutex
	names []string
	state []string
	since []time.Time
	drawn int
	tick  chan struct{}
	done  chan struct{}
}

func (d *display) start() {
	if !d.live {
		return
	}
	d.tick, d.done = make(chan struct{}), make(chan struct{})
	d.mu.Lock()
	d.draw()
	d.mu.Unlock()
	go func() {
		defer close(d.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-d.tick:
				return
			case <-t.C:
				d.mu.Lock()
				d.draw()
				d.mu.Unlock()
			}
		}
	}()
}

func (d *display) stop() {
	if !d.live {
		return
	}
	close(d.tick)
	<-d.done
	d.mu.Lock()
	d.draw()
	d.mu.Unlock()
}

// draw rewrites the block of status lines (live only).
func (d *display) draw() {
	var b strings.Builder
	if d.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", d.drawn)
	}
	for i, n := range d.names {
		s := d.state[i]
		if s == "running" {
			s = fmt.Sprintf("running (%.1fs)", time.Since(d.since[i]).Seconds())
		}
		fmt.Fprintf(&b, "\x1b[2K  %-*s %s\n", d.width, n, s)
	}
	d.drawn = len(d.names)
	io.WriteString(d.w, b.String())
}

// clear removes the block of status lines, leaving the cursor where it
// began (live only).
func (d *display) clear() {
	if d.drawn == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\x1b[%dA", d.drawn)
	for range d.drawn {
		b.WriteString("\x1b[2K\n")
	}
	fmt.Fprintf(&b, "\x1b[%dA", d.drawn)
	io.WriteString(d.w, b.String())
	d.drawn = 0
}

func (d *display) set(i int, state string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state[i], d.since[i] = state, time.Now()
}

// finish records job i's last state and prints its output block.
func (d *display) finish(i int, state string, out *capped) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state[i] = state
	if d.live {
		d.clear()
	}
	if out != nil {
		out.writeBlock(d.out, d.names[i])
	}
	if d.live {
		d.draw()
		return
	}
	fmt.Fprintf(d.w, "  %s %s\n", d.names[i], state)
}

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	mu      sync.Mutex
	max     int
	b       bytes.Buffer
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - c.b.Len()
	if room < len(p) {
		c.dropped += int64(len(p) - max(room, 0))
		if room > 0 {
			c.b.Write(p[:room])
		}
		return len(p), nil
	}
	c.b.Write(p)
	return len(p), nil
}

// writeBlock writes the output, each line prefixed with "[name] ".
func (c *capped) writeBlock(w io.Writer, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.b.Len() == 0 && c.dropped == 0 {
		return
	}
	var b bytes.Buffer
	prefix := "[" + name + "] "
	for _, l := range bytes.SplitAfter(c.b.Bytes(), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		b.WriteString(prefix)
		b.Write(l)
		if l[len(l)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	if c.dropped > 0 {
		fmt.Fprintf(&b, "%s[%d more bytes of output dropped]\n", prefix, c.dropped)
	}
	w.Write(b.Bytes())
}

// PipelineStep is one step to run: its settings and its Runner, made
// for the host directories bound at its input (InDir) and output
// (OutDir) paths.
type PipelineStep struct {
	Step
	Run func(ctx context.Context, inDir, outDir string, stdout, stderr io.Writer) (int, error)
}

// ErrStepFailed is the failure of a pipeline's step.
var ErrStepFailed = errors.New("pipeline step failed")

// PipelineOptions are RunPipeline's streams: the steps' output, and
// the progress lines.
type PipelineOptions struct {
	Stdout, Stderr, Status io.Writer
	// TempDir is where the steps' directories are made ("": os.TempDir).
	TempDir string
}

// RunPipeline runs steps in order, each step's output files handed to
// the next step's input, stopping at the first that fails with "Pipeline
// failed at step '<name>' (i/N)" (ErrStepFailed). It prints
// "  [i/N] <name> done (X.Xs)" or "FAILED (X.Xs)" per step and
// "  Done (X.Xs total)" at the end. Every directory it made is removed
// before it returns.
func RunPipeline(ctx context.Context, steps []PipelineStep, o PipelineOptions) error {
	root, err := os.MkdirTemp(o.TempDir, "agentkernel-pipeline-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	start := time.Now()
	prevOut := ""
	for i, s := range steps {
		inDir, outDir := "", ""
		if s.Input != "" {
			inDir = filepath.Join(root, fmt.Sprintf("%d-in", i+1))
			if err := os.Mkdir(inDir, 0o700); err != nil {
				return err
			}
			if prevOut != "" {
				if err := handFiles(prevOut, inDir); err != nil {
					return fmt.Errorf("step '%s': input: %w", s.Name, err)
				}
			}
		}
		if s.Output != "" {
			outDir = filepath.Join(root, fmt.Sprintf("%d-out", i+1))
			if err := os.Mkdir(outDir, 0o700); err != nil {
				return err
			}
		}
		t0 := time.Now()
		code, err := s.Run(ctx, inDir, outDir, o.Stdout, o.Stderr)
		took := time.Since(t0).Seconds()
		if err != nil || code != 0 {
			fmt.Fprintf(o.Status, "  [%d/%d] %-20s FAILED (%.1fs)\n", i+1, len(steps), s.Name, took)
			why := fmt.Sprintf("exit status %d", code)
			if err != nil {
				why = err.Error()
			}
			return &StepError{Name: s.Name, Index: i + 1, Total: len(steps), Why: why, ExitCode: code, Err: err}
		}
		fmt.Fprintf(o.Status, "  [%d/%d] %-20s done (%.1fs)\n", i+1, len(steps), s.Name, took)
		if prevOut != "" {
			os.RemoveAll(prevOut)
		}
		prevOut = outDir
		if inDir != "" {
			os.RemoveAll(inDir)
		}
	}
	fmt.Fprintf(o.Status, "  Done (%.1fs total)\n", time.Since(start).Seconds())
	return nil
}

// StepError is a pipeline's failed step.
type StepError struct {
	Name         string
	Index, Total int
	Why          string
	ExitCode     int
	Err          error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("Pipeline failed at step '%s' (%d/%d): %s", e.Name, e.Index, e.Total, e.Why)
}
func (e *StepError) Is(target error) bool { return target == ErrStepFailed }
func (e *StepError) Unwrap() error        { return e.Err }

// handFiles copies the regular files directly in from (a step's output,
// written by the sandbox: hostile) to to, never following a link and
// skipping everything that is not a regular file.
func handFiles(from, to string) error {
	ents, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyRegular(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyRegular(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, st.Mode().Perm()&0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
