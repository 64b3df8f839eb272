package native

import (
	"io"
	"os"
	"sync"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// stdioFiles are the init's fds 0-2. An *os.File is handed over as is (no
// copying, no goroutine); any other reader or writer goes through a pipe
// with a copy loop, and a nil stream is /dev/null.
type stdioFiles struct {
	child   [3]*os.File // the ends the init gets
	ours    []*os.File  // child ends we opened and must close
	copiers []func()
	outDone sync.WaitGroup
}

func newStdioFiles(s sandbox.Stdio) (*stdioFiles, error) {
	f := &stdioFiles{}
	devNull := func() (*os.File, error) {
		n, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err == nil {
			f.ours = append(f.ours, n)
		}
		return n, err
	}
	var err error
	switch in := s.Stdin.(type) {
	case nil:
		f.child[0], err = devNull()
	case *os.File:
		f.child[0] = in
	default:
		r, w, perr := os.Pipe()
		if perr != nil {
			return nil, perr
		}
		f.child[0] = r
		f.ours = append(f.ours, r)
		f.copiers = append(f.copiers, func() {
			// Not waited for: the reader may block forever.
			go func() { _, _ = io.Copy(w, in); w.Close() }()
		})
	}
	if err != nil {
		return nil, err
	}
	for i, out := range []io.Writer{s.Stdout, s.Stderr} {
		switch o := out.(type) {
		case nil:
			f.child[i+1], err = devNull()
		case *os.File:
			f.child[i+1] = o
		default:
			r, w, perr := os.Pipe()
			if perr != nil {
				f.closeChild()
				return nil, perr
			}
			f.child[i+1] = w
			f.ours = append(f.ours, w)
			f.outDone.Add(1)
			f.copiers = append(f.copiers, func() {
				go func() { defer f.outDone.Done(); _, _ = io.Copy(o, r); r.Close() }()
			})
		}
		if err != nil {
			f.closeChild()
			return nil, err
		}
	}
	return f, nil
}

// start runs the copy loops (after the init has its ends).
func (f *stdioFiles) start() {
	for _, c := range f.copiers {
		c()
	}
	f.copiers = nil
}

// closeChild closes the ends we opened for the init.
func (f *stdioFiles) closeChild() {
	for _, o := range f.ours {
		o.Close()
	}
	f.ours = nil
}

// wait waits until the outputs are drained: every writer in the sandbox
// is gone once the init has exited (the PID namespace died with it).
func (f *stdioFiles) wait() { f.outDone.Wait() }
