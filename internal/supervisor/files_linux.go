package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/store"
)

// filesFile lists, in a sandbox's directory, the host files copied into
// it at each start (sandbox.FileCopy, the configuration's [[files]]).
const filesFile = "files.json"

// maxCopiedFile is the largest host file copied in at a start.
const maxCopiedFile = 64 << 20

var _ sandbox.FileKeeper = (*Manager)(nil)

// KeepFiles records files for the sandbox name, to be copied in at each
// of its starts.
func (m *Manager) KeepFiles(_ context.Context, name string, files []sandbox.FileCopy) error {
	for _, f := range files {
		if !filepath.IsAbs(f.Source) || !strings.HasPrefix(f.Dest, "/") {
			return fmt.Errorf("file to copy %s to %s: both paths must be absolute", f.Source, f.Dest)
		}
	}
	b, err := json.Marshal(files)
	if err != nil {
		return err
	}
	dir := m.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, filesFile), b, 0o600)
}

// copyFiles copies the files recorded for name into the running
// sandbox, through its supervisor (as 'cp' does: the sandbox's own
// rules on paths apply). A file that cannot be read fails the start.
func (m *Manager) copyFiles(ctx context.Context, name string) error {
	dir := m.Dir(name)
	b, err := os.ReadFile(filepath.Join(dir, filesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var files []sandbox.FileCopy
	if err := json.Unmarshal(b, &files); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, filesFile), err)
	}
	if len(files) == 0 {
		return nil
	}
	c, err := agent.Dial(filepath.Join(dir, "sock"))
	if err != nil {
		return err
	}
	defer c.Close()
	conn := agent.SandboxConn{C: c, Dir: dir}
	for _, f := range files {
		if err := copyFile(ctx, conn, f); err != nil {
			return fmt.Errorf("[[files]] %s -> %s: %w", f.Source, f.Dest, err)
		}
	}
	return nil
}

// copyFile copies one host file into the sandbox. A source confined to
// a directory (f.Within) is opened through os.Root, so that no symlink
// leads it out; only regular files are read.
func copyFile(ctx context.Context, conn agent.SandboxConn, f sandbox.FileCopy) error {
	var src *os.File
	var err error
	if f.Within != "" {
		rel, rerr := filepath.Rel(f.Within, f.Source)
		if rerr != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("the file is outside %s, the directory of the agentkernel.toml that names it", f.Within)
		}
		root, rerr := os.OpenRoot(f.Within)
		if rerr != nil {
			return fmt.Errorf("failed to read file for injection: %w", rerr)
		}
		src, err = root.OpenFile(rel, os.O_RDONLY|unix.O_NONBLOCK, 0)
		root.Close()
	} else {
		src, err = os.OpenFile(f.Source, os.O_RDONLY|unix.O_NONBLOCK, 0)
	}
	if err != nil {
		return fmt.Errorf("failed to read file for injection: %w", err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file")
	}
	if fi.Size() > maxCopiedFile {
		return fmt.Errorf("%d bytes: larger than the %d MiB a copied file may have", fi.Size(), maxCopiedFile>>20)
	}
	mode := f.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	_, err = conn.WriteFile(ctx, f.Dest, io.LimitReader(src, maxCopiedFile), mode)
	return err
}

// stopSpawned stops the supervisor pid (started at start) of the sandbox
// in dir that Start has just spawned and must not leave running.
func stopSpawned(ctx context.Context, dir string, pid int, start uint64) {
	sb := &store.Sandbox{SupervisorPID: pid, SupervisorStart: start}
	if c, err := agent.Dial(filepath.Join(dir, "sock")); err == nil {
		_ = c.Stop(ctx)
		c.Close()
	}
	for i := 0; i < 500 && alive(sb); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(sb) {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}
