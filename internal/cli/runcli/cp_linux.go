package runcli

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// RunCp is 'cp': src or dst (exactly one) is NAME:/path, checked by
// ParseSandboxCommand. As with docker cp, a host side of "-" is a tar
// stream: SRC "-" is a tar archive read from standard input and extracted
// into the directory DEST; DEST "-" writes SRC as a tar archive to
// standard output.
func (a *App) RunCp(ctx context.Context, m *sandbox.Manager, src, dst string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	sName, sPath, sRemote := SplitRemote(src)
	dName, dPath, dRemote := SplitRemote(dst)
	if sRemote == dRemote {
		return UsageError("cp: exactly one of SRC and DEST must be NAME:/path")
	}
	name := sName
	if dRemote {
		name = dName
	}
	c, err := m.Connect(ctx, name)
	if err != nil {
		return err
	}
	defer c.Close()
	switch {
	case sRemote && dst == "-":
		return a.cpOutTar(ctx, c, sPath)
	case sRemote:
		return cpOut(ctx, c, sPath, dst)
	case src == "-":
		return a.cpInTar(ctx, c, dPath)
	}
	return cpIn(ctx, c, src, dPath)
}

// isTerminal reports whether f is an *os.File on a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// cpOutTar writes the sandbox's sPath to standard output as a tar stream
// whose entries are named by sPath's base name.
func (a *App) cpOutTar(ctx context.Context, c sandbox.Conn, sPath string) error {
	if isTerminal(a.Stdout) {
		return UsageError("cp: standard output is a terminal: 'cp NAME:PATH -' writes a tar archive; redirect it to a file or a pipe")
	}
	// Nothing reaches standard output before the sandbox has said that
	// sPath can be archived.
	if err := cpCheckSource(ctx, c, sPath); err != nil {
		return err
	}
	if err := c.TarOut(ctx, sPath, a.Stdout); err != nil {
		return cpError(sPath, err)
	}
	return nil
}

// cpInTar extracts the tar stream on standard input into the sandbox's
// directory dPath, which must exist.
func (a *App) cpInTar(ctx context.Context, c sandbox.Conn, dPath string) error {
	in := a.Stdin
	if in == nil {
		return UsageError("cp: 'cp - NAME:DIR' reads a tar archive from standard input, and there is none")
	}
	if isTerminal(in) {
		return UsageError("cp: 'cp - NAME:DIR' reads a tar archive from standard input, which is a terminal: pipe or redirect one in")
	}
	st, err := c.Stat(ctx, dPath)
	if err != nil {
		return cpError(dPath, err)
	}
	if !st.Mode.IsDir() {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: not a directory in the sandbox (a tar archive on standard input is extracted into a directory)", dPath)}
	}
	v := &tarCheck{}
	pr := v.filter(in)
	err = c.TarIn(ctx, dPath, pr)
	entries, verr := v.result()
	// The sandbox stopped reading: end the filter, if it still writes.
	pr.CloseWithError(errSandboxStopped)
	switch {
	case verr != nil:
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: standard input is not a tar archive: %w", verr)}
	case err != nil:
		return cpError(dPath, err)
	case entries == 0:
		return &ExitError{Code: ExitAgentkernel, Err: errors.New("cp: standard input held an empty tar archive: nothing was copied")}
	}
	return nil
}

// tarCheck passes a tar stream through, entry by entry, recording the
// first error in reading it and how many entries it had, so that a
// stream that is not a tar archive is reported as such rather than as a
// short extraction.
type tarCheck struct {
	mu      sync.Mutex
	err     error
	entries int
}

func (v *tarCheck) result() (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.entries, v.err
}

// recordingWriter remembers its writer's first error.
type recordingWriter struct {
	w   io.Writer
	err error
}

func (r *recordingWriter) Write(b []byte) (int, error) {
	n, err := r.w.Write(b)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}

// filter is r checked by v: the same entries, rewritten.
func (v *tarCheck) filter(r io.Reader) *io.PipeReader {
	pr, pw := io.Pipe()
	go func() {
		out := &recordingWriter{w: pw}
		tr, tw := tar.NewReader(r), tar.NewWriter(out)
		fail := func(err error) {
			// A failure to write is the reader's (the sandbox's), not
			// the stream's.
			if out.err == nil {
				v.mu.Lock()
				v.err = err
				v.mu.Unlock()
			}
			pw.CloseWithError(err)
		}
		for {
			h, err := tr.Next()
			if err == io.EOF {
				pw.CloseWithError(tw.Close())
				return
			}
			if err != nil {
				fail(err)
				return
			}
			v.mu.Lock()
			v.entries++
			v.mu.Unlock()
			if err := tw.WriteHeader(h); err != nil {
				fail(err)
				return
			}
			if _, err := io.Copy(tw, tr); err != nil {
				fail(err)
				return
			}
		}
	}()
	return pr
}

// cpCheckSource says, in cp's words, why the sandbox's sPath cannot be
// copied out, before anything is written.
func cpCheckSource(ctx context.Context, c sandbox.Conn, sPath string) error {
	st, err := c.Stat(ctx, sPath)
	if err != nil {
		return cpError(sPath, err)
	}
	if !st.Mode.IsDir() && !st.Mode.IsRegular() {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: not a file or directory in the sandbox", sPath)}
	}
	return nil
}

// renameTop rewrites the first path component of every entry from to to.
func renameTop(r io.Reader, from, to string) io.Reader {
	if from == to {
		return r
	}
	pr, pw := io.Pipe()
	go func() {
		tr, tw := tar.NewReader(r), tar.NewWriter(pw)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				pw.CloseWithError(tw.Close())
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if h.Name == from || h.Name == from+"/" || strings.HasPrefix(h.Name, from+"/") {
				h.Name = to + strings.TrimPrefix(h.Name, from)
			}
			if err := tw.WriteHeader(h); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := io.Copy(tw, tr); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}

// cpOut copies the sandbox's sPath to the host path dst.
func cpOut(ctx context.Context, c sandbox.Conn, sPath, dst string) error {
	if err := cpCheckSource(ctx, c, sPath); err != nil {
		return err
	}
	base := path.Base(path.Clean("/" + sPath))
	if base == "/" {
		base = "."
	}
	into, newName := dst, base
	if fi, err := os.Stat(dst); err != nil || !fi.IsDir() {
		// Like docker cp: DEST/ names a directory that must exist, and
		// a new DEST is created only in an existing directory.
		if strings.HasSuffix(dst, "/") {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: no such directory", dst)}
		}
		into, newName = filepath.Dir(dst), filepath.Base(dst)
	}
	dfd, err := unix.Open(into, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return cpHostError(into, err)
	}
	defer unix.Close(dfd)
	hostFS := &agent.FS{Root: dfd, UID: -1, GID: -1}
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := hostFS.TarIn(".", renameTop(pr, base, newName))
		pr.CloseWithError(err)
		errc <- err
	}()
	err = c.TarOut(ctx, sPath, pw)
	pw.CloseWithError(err)
	xerr := <-errc
	if err != nil {
		return cpError(sPath, err)
	}
	if xerr != nil {
		return cpFileError("cp: writing "+dst, xerr)
	}
	return nil
}

// cpIn copies the host path src into the sandbox at dPath.
func cpIn(ctx context.Context, c sandbox.Conn, src, dPath string) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return cpFileError("cp", err)
	}
	// The source is looked at before anything is asked of the sandbox:
	// a missing one is an error that names it, never an empty copy.
	fi, err := os.Lstat(abs)
	if err != nil {
		return cpHostError(src, err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: is a symbolic link: give the path it points to", src)}
	case !fi.IsDir() && !fi.Mode().IsRegular():
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: not a file or directory", src)}
	}
	dfd, err := unix.Open(filepath.Dir(abs), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return cpHostError(filepath.Dir(abs), err)
	}
	defer unix.Close(dfd)
	base := filepath.Base(abs)
	into, newName := dPath, base
	if st, err := c.Stat(ctx, dPath); err != nil || !st.Mode.IsDir() {
		var pe *sandbox.PathError
		if err != nil && !(errors.As(err, &pe) && pe.NotExist) {
			return cpError(dPath, err)
		}
		// Like docker cp: DEST/ names a directory that must exist, and
		// a new DEST is created only in an existing directory.
		if strings.HasSuffix(dPath, "/") {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: no such directory in the sandbox", dPath)}
		}
		into, newName = path.Dir(path.Clean("/"+dPath)), path.Base(path.Clean("/"+dPath))
		if st, err := c.Stat(ctx, into); err != nil || !st.Mode.IsDir() {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: no such directory in the sandbox", into)}
		}
	}
	hostFS := &agent.FS{Root: dfd, UID: -1, GID: -1}
	pr, pw := io.Pipe()
	// What the host side could not read is reported too: the sandbox
	// would see it only as the archive's early end.
	readErr := make(chan error, 1)
	go func() {
		err := hostFS.TarOut(base, pw)
		readErr <- err
		pw.CloseWithError(err)
	}()
	err = c.TarIn(ctx, into, renameTop(pr, base, newName))
	if err != nil {
		pr.CloseWithError(errSandboxStopped)
	}
	if rerr := <-readErr; rerr != nil && !errors.Is(rerr, errSandboxStopped) {
		return cpHostError(src, rerr)
	}
	if err != nil {
		return cpError(into, err)
	}
	return nil
}

// errSandboxStopped ends the host side of a copy into a sandbox that
// stopped reading it.
var errSandboxStopped = errors.New("the sandbox stopped reading")

func cpError(p string, err error) error {
	var pe *sandbox.PathError
	if errors.As(err, &pe) && pe.Refused {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %v", err)}
	}
	if errors.As(err, &pe) && pe.NotExist {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: no such file or directory in the sandbox", p)}
	}
	return cpFileError("cp "+p, err)
}

// cpHostError is a failure to read or open the host path p, named.
func cpHostError(p string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, fs.ErrNotExist) {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: no such file or directory", p)}
	}
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("cp: %s: %w", p, err)}
}

func cpFileError(what string, err error) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("%s: %w", what, err)}
}
