package runcli

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// RunCp is 'cp': src or dst (exactly one) is NAME:/path, checked by
// ParseSandboxCommand.
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
	if sRemote {
		return cpOut(ctx, c, sPath, dst)
	}
	return cpIn(ctx, c, src, dPath)
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
	base := path.Base(path.Clean("/" + sPath))
	if base == "/" {
		base = "."
	}
	into, newName := dst, base
	if fi, err := os.Stat(dst); err != nil || !fi.IsDir() {
		into, newName = filepath.Dir(dst), filepath.Base(dst)
	}
	dfd, err := unix.Open(into, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return cpFileError("cp", err)
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
	dfd, err := unix.Open(filepath.Dir(abs), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return cpFileError("cp", err)
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
	go func() { pw.CloseWithError(hostFS.TarOut(base, pw)) }()
	if err := c.TarIn(ctx, into, renameTop(pr, base, newName)); err != nil {
		pr.CloseWithError(err)
		return cpError(into, err)
	}
	return nil
}

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

func cpFileError(what string, err error) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("%s: %w", what, err)}
}
