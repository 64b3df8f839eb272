package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/asciicast"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
)

// terminalRecorder is attach --record's runcli.TerminalRecorder: an
// asciicast v2 file per session.
type terminalRecorder struct{ a *App }

func (t *terminalRecorder) Start(r runcli.RecordRequest) (runcli.TerminalRecording, error) {
	now := time.Now()
	path := asciicast.Path(r.File, t.a.DataDir, r.Sandbox, now)
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	f, err := asciicast.Create(path)
	if err != nil {
		return nil, err
	}
	h := asciicast.Header{Width: r.Cols, Height: r.Rows, Timestamp: now.Unix(),
		Command: r.Command, Title: "agentkernel attach " + r.Sandbox}
	if term := os.Getenv("TERM"); term != "" && len(term) < 64 {
		h.Env = map[string]string{"TERM": term, "SHELL": r.Command}
	}
	w, err := asciicast.NewWriter(f, h)
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("recording %s: %w", path, err)
	}
	return &castRecording{Writer: w, f: f, path: path}, nil
}

// castRecording is one recording file.
type castRecording struct {
	*asciicast.Writer
	f    *os.File
	path string
	once sync.Once
	err  error
	some atomic.Bool
}

func (c *castRecording) File() string { return c.path }

// Output, Input and Resize note that something was recorded.
func (c *castRecording) Output(p []byte) error {
	if len(p) > 0 {
		c.some.Store(true)
	}
	return c.Writer.Output(p)
}

func (c *castRecording) Input(p []byte) error {
	if len(p) > 0 {
		c.some.Store(true)
	}
	return c.Writer.Input(p)
}

func (c *castRecording) Resize(cols, rows int) error {
	c.some.Store(true)
	return c.Writer.Resize(cols, rows)
}

func (c *castRecording) Empty() bool { return !c.some.Load() }

func (c *castRecording) Close() error {
	c.once.Do(func() {
		err := c.Writer.Close()
		if err == nil {
			err = c.f.Sync()
		}
		c.err = errors.Join(err, c.f.Close())
		if c.Empty() {
			// A header alone is no recording: the session never began.
			c.err = errors.Join(c.err, os.Remove(c.path))
		}
	})
	return c.err
}

func newReplayCmd(a *App) *cobra.Command {
	var speed float64
	var maxIdle time.Duration
	cmd := &cobra.Command{
		Use:   "replay FILE",
		Short: "Play a terminal recording (attach --record) back",
		Long: `Play an asciicast v2 recording (what 'attach --record' writes, and what
asciinema writes) back to stdout with its timing: the terminal's output as
it came, --speed times as fast. A pause longer than --max-idle (after the
speed is applied) is cut to it, so that a session left idle for an hour
plays in seconds. What was typed (--record-input) is not played: the
terminal's echo of it is in the output already.

A line about the recording (size, duration, speed) goes to stderr before
and after it, not with --quiet. A file that is not an asciicast v2
recording is refused before anything is played (exit status 125), with the
line that is wrong; a recording damaged further on plays up to that line.`,
		Example: `  agentkernel attach --record dev
  agentkernel replay ~/.local/share/agentkernel/recordings/dev-20260101-120000.cast
  agentkernel replay --speed 4 --max-idle 500ms session.cast`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.replayCast(cmd, args[0], speed, maxIdle)
		},
	}
	cmd.Flags().Float64VarP(&speed, "speed", "s", 1, "play this many times as fast (0.5: half as fast)")
	cmd.Flags().DurationVar(&maxIdle, "max-idle", 2*time.Second, "cut longer pauses to this (0: the recording's own idle_time_limit, if any, else no cut)")
	return cmd
}

func (a *App) replayCast(cmd *cobra.Command, file string, speed float64, maxIdle time.Duration) error {
	refuse := func(err error, hint string) error {
		return &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: err, Hint: hint}
	}
	switch {
	case !(speed > 0) || speed > 1e6:
		return refuse(fmt.Errorf("replay: --speed %v: give a number above 0 (2: twice as fast)", speed), "")
	case maxIdle < 0:
		return refuse(fmt.Errorf("replay: --max-idle %v: give a duration of 0 or more", maxIdle), "")
	}
	f, err := os.Open(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return refuse(fmt.Errorf("recording file not found: %s", file), "'agentkernel attach --record NAME' records to "+asciicast.Dir(a.DataDir))
	case err != nil:
		return refuse(err, "")
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
		return refuse(fmt.Errorf("replay: %s is not a regular file", file), "")
	}
	// Every line is checked before anything plays.
	sum, err := asciicast.Scan(f)
	if err != nil {
		if errors.Is(err, asciicast.ErrFormat) {
			return refuse(fmt.Errorf("%s is not an asciicast v2 recording: %w", file, err), "replay plays what 'attach --record' (or asciinema) wrote")
		}
		return refuse(fmt.Errorf("replay %s: %w", file, err), "")
	}
	if _, err := f.Seek(0, 0); err != nil {
		return refuse(err, "")
	}
	if !a.Quiet {
		fmt.Fprintf(a.Stderr, "Playing: %s\nTerminal: %dx%d, Duration: %.1fs, Speed: %gx\n%s\n",
			file, sum.Header.Width, sum.Header.Height, sum.Duration, speed, strings.Repeat("-", 40))
	}
	if err := asciicast.Replay(cmdContext(cmd), f, a.Stdout, speed, maxIdle); err != nil {
		return refuse(fmt.Errorf("replay %s: %w", file, err), "")
	}
	if !a.Quiet {
		fmt.Fprintf(a.Stderr, "\n%s\nPlayback complete.\n", strings.Repeat("-", 40))
	}
	return nil
}
