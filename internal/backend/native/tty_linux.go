package native

import (
	"io"
	"os"
	"sync"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ttyState is the host side of a sandbox's pseudo-terminal: the master
// end, the copy loops and the saved state of the user's terminal.
type ttyState struct {
	master, slave *os.File
	stdio         sandbox.Stdio
	inFile        *os.File // stdin when it is a terminal
	saved         *term.State
	outDone       sync.WaitGroup
	restoreOnce   sync.Once
}

// openTTY allocates a pty sized like the user's terminal and puts that
// terminal in raw mode (restored by restore, always).
func openTTY(stdio sandbox.Stdio) (*ttyState, error) {
	master, slave, err := pty.Open()
	if err != nil {
		return nil, err
	}
	t := &ttyState{master: master, slave: slave, stdio: stdio}
	if f, ok := stdio.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		t.inFile = f
		_ = pty.InheritSize(f, master)
		if st, err := term.MakeRaw(int(f.Fd())); err == nil {
			t.saved = st
		}
	}
	return t, nil
}

// userTerminal is openTTY without the pty, which the sandbox's devpts
// gives later (Exec.SandboxPTY): the user's terminal goes raw now.
func userTerminal(stdio sandbox.Stdio) *ttyState {
	t := &ttyState{stdio: stdio}
	if f, ok := stdio.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		t.inFile = f
		if st, err := term.MakeRaw(int(f.Fd())); err == nil {
			t.saved = st
		}
	}
	return t
}

// inheritSize gives the pty the user's terminal's size, when both exist.
func (t *ttyState) inheritSize() {
	if t.inFile != nil && t.master != nil {
		_ = pty.InheritSize(t.inFile, t.master)
	}
}

// copy starts the two copy loops. Output ends when the last holder of the
// slave end (the sandbox) is gone; input runs until the process exits.
func (t *ttyState) copy() {
	if t.stdio.Stdin != nil {
		go agent.CopyToPTY(t.master, t.stdio.Stdin, t.inFile != nil)
	}
	t.outDone.Add(1)
	go func() {
		defer t.outDone.Done()
		out := t.stdio.Stdout
		if out == nil {
			out = io.Discard
		}
		_, _ = io.Copy(out, t.master)
	}()
}

// resize copies the user's terminal size to the pty (SIGWINCH).
func (t *ttyState) resize() { t.inheritSize() }

// wait waits for the output to drain.
func (t *ttyState) wait() { t.outDone.Wait() }

// restore gives the user's terminal back its mode and closes the pty.
func (t *ttyState) restore() {
	t.restoreOnce.Do(func() {
		if t.saved != nil {
			_ = term.Restore(int(t.inFile.Fd()), t.saved)
		}
		t.master.Close()
		t.slave.Close()
	})
}
