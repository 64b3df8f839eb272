package engine

import (
	"context"
	"os"

	"github.com/moby/moby/client"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// terminal puts the caller's terminal in raw mode for a run with a
// pseudo-terminal whose stdin is one (the container's terminal does the
// line editing and signals) and returns what restores it.
func (b *Backend) terminal(spec *sandbox.Spec, stdio sandbox.Stdio) (restore func()) {
	f, ok := stdio.Stdin.(*os.File)
	if !spec.TTY || !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}
	}
	st, err := term.MakeRaw(int(f.Fd()))
	if err != nil {
		return func() {}
	}
	return func() { _ = term.Restore(int(f.Fd()), st) }
}

// resize gives the container's terminal the size of the caller's.
func (b *Backend) resize(cli *client.Client, id string, spec *sandbox.Spec, stdio sandbox.Stdio) {
	if !spec.TTY {
		return
	}
	for _, s := range []any{stdio.Stdout, stdio.Stdin} {
		f, ok := s.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			continue
		}
		if w, h, err := term.GetSize(int(f.Fd())); err == nil && w > 0 && h > 0 {
			_, _ = cli.ContainerResize(context.Background(), id, client.ContainerResizeOptions{Height: uint(h), Width: uint(w)})
		}
		return
	}
}
