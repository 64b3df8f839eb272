package cli

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

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func newCpCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DEST",
		Short: "Copy files or directories between a running sandbox and the host",
		Long: `Copy a file or directory tree into or out of a running sandbox; one side
is NAME:/path. Like docker cp: when DEST is an existing directory the source
is copied into it, otherwise it is copied to DEST, whose parent directory
must exist (DEST/ with a trailing slash must be an existing directory).
Paths in the sandbox are
resolved inside it (its symlinks never reach host files); set-id bits are
dropped and symlinks are copied as symlinks.`,
		Example: `  agentkernel cp ./src dev:/work/src
  agentkernel cp dev:/work/out.txt .`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runCp(cmd.Context(), args[0], args[1])
		},
	}
}

// splitRemote parses NAME:/path; ok is false for a host path.
func splitRemote(s string) (name, p string, ok bool) {
	name, p, ok = strings.Cut(s, ":")
	if !ok || name == "" || strings.ContainsAny(name, "/.") || config.ValidateSandboxName(name) != nil {
		return "", "", false
	}
	if p == "" {
		p = "/"
	}
	return name, p, true
}

func (a *App) runCp(ctx context.Context, src, dst string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	sName, sPath, sRemote := splitRemote(src)
	dName, dPath, dRemote := splitRemote(dst)
	if sRemote == dRemote {
		return usageError("cp: exactly one of SRC and DEST must be NAME:/path")
	}
	name := sName
	if dRemote {
		name = dName
	}
	m, done, err := a.sandboxes()
	if err != nil {
		return err
	}
	defer done()
	c, err := m.Connect(ctx, name)
	if err != nil {
		return sandboxError(name, err)
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
		return fileError("cp", err)
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
		return fileError("cp: writing "+dst, xerr)
	}
	return nil
}

// cpIn copies the host path src into the sandbox at dPath.
func cpIn(ctx context.Context, c sandbox.Conn, src, dPath string) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return fileError("cp", err)
	}
	dfd, err := unix.Open(filepath.Dir(abs), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fileError("cp", err)
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
	return fileError("cp "+p, err)
}
