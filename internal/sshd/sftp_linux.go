package sshd

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/pkg/sftp"

	"github.com/agentkernel/agentkernel/internal/agent"
)

// sftp serves the sftp subsystem on the session's channel over the
// sandbox's files (agent.FS: every path resolved below the sandbox's
// root, /proc, /sys and /dev refused). Links are listed, not made.
func (ss *session) sftp() {
	h := &sftpFS{fs: ss.s.o.FS}
	srv := sftp.NewRequestServer(ss.ch, sftp.Handlers{FileGet: h, FilePut: h, FileCmd: h, FileList: h})
	err := srv.Serve()
	if err != nil && !errors.Is(err, io.EOF) {
		ss.s.logf("ssh: sftp: %v", err)
	}
	// The exit status before the close (Close closes the channel).
	ss.exit(0)
	srv.Close()
}

type sftpFS struct{ fs *agent.FS }

// sftpErr maps a refusal to "permission denied" and keeps an errno as
// the bare number the sftp package translates; the text of other errors
// reaches the client.
func sftpErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, agent.ErrRefused) {
		return sftp.ErrSSHFxPermissionDenied
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

func (h *sftpFS) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	f, err := h.fs.Open(r.Filepath)
	if err != nil {
		return nil, sftpErr(err)
	}
	return f, nil
}

func (h *sftpFS) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	fl := r.Pflags()
	mode := uint32(0o644)
	if r.AttrFlags().Permissions {
		if m := uint32(r.Attributes().FileMode().Perm()); m != 0 {
			mode = m
		}
	}
	if fl.Creat && fl.Excl {
		if _, err := h.fs.Lstat(r.Filepath); err == nil {
			return nil, syscall.EEXIST
		}
	}
	if fl.Trunc {
		f, err := h.fs.Create(r.Filepath, mode)
		return writerOrNil(f, err)
	}
	f, err := h.fs.OpenWrite(r.Filepath)
	if err != nil && errors.Is(err, syscall.ENOENT) && fl.Creat {
		f, err = h.fs.Create(r.Filepath, mode)
	}
	return writerOrNil(f, err)
}

func writerOrNil(f *os.File, err error) (io.WriterAt, error) {
	if err != nil {
		return nil, sftpErr(err)
	}
	return f, nil
}

func (h *sftpFS) Filecmd(r *sftp.Request) error {
	switch r.Method {
	case "Setstat":
		a, fl := r.Attributes(), r.AttrFlags()
		mode, size := int64(-1), int64(-1)
		var at, mt time.Time
		if fl.Permissions {
			mode = int64(a.Mode & 0o7777)
		}
		if fl.Size {
			size = int64(a.Size)
		}
		if fl.Acmodtime {
			at, mt = time.Unix(int64(a.Atime), 0), time.Unix(int64(a.Mtime), 0)
		}
		// Ownership is the sandbox's to decide: a uid/gid change is
		// ignored, as it is for a client that is not root.
		return sftpErr(h.fs.SetAttr(r.Filepath, mode, size, at, mt))
	case "Rename", "PosixRename":
		return sftpErr(h.fs.Rename(r.Filepath, r.Target))
	case "Rmdir":
		e, err := h.fs.Lstat(r.Filepath)
		if err != nil {
			return sftpErr(err)
		}
		if !fs.FileMode(e.Mode).IsDir() {
			return syscall.ENOTDIR
		}
		return sftpErr(h.fs.Delete(r.Filepath, false))
	case "Remove":
		e, err := h.fs.Lstat(r.Filepath)
		if err != nil {
			return sftpErr(err)
		}
		if fs.FileMode(e.Mode).IsDir() {
			return syscall.EISDIR
		}
		return sftpErr(h.fs.Delete(r.Filepath, false))
	case "Mkdir":
		mode := uint32(0o755)
		if r.AttrFlags().Permissions {
			mode = uint32(r.Attributes().FileMode().Perm())
		}
		return sftpErr(h.fs.Mkdir(r.Filepath, mode))
	case "Link", "Symlink":
		// Links are made in the sandbox, by its own commands.
		return sftp.ErrSSHFxOpUnsupported
	}
	return sftp.ErrSSHFxOpUnsupported
}

func (h *sftpFS) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	switch r.Method {
	case "List":
		es, err := h.fs.List(r.Filepath)
		if err != nil {
			return nil, sftpErr(err)
		}
		out := make(lister, 0, len(es))
		for _, e := range es {
			out = append(out, fileInfo{e})
		}
		return out, nil
	case "Stat":
		e, err := h.fs.Stat(r.Filepath)
		if err != nil {
			return nil, sftpErr(err)
		}
		e.Name = path.Base(path.Clean("/" + r.Filepath))
		return lister{fileInfo{e}}, nil
	case "Lstat":
		return h.Lstat(r)
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat describes a link itself.
func (h *sftpFS) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	e, err := h.fs.Lstat(r.Filepath)
	if err != nil {
		return nil, sftpErr(err)
	}
	return lister{fileInfo{e}}, nil
}

// Readlink reports a link's target as the sandbox sees it.
func (h *sftpFS) Readlink(p string) (string, error) {
	e, err := h.fs.Lstat(p)
	if err != nil {
		return "", sftpErr(err)
	}
	if e.Link == "" {
		return "", syscall.EINVAL
	}
	return e.Link, nil
}

type lister []os.FileInfo

func (l lister) ListAt(out []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(out, l[off:])
	if off+int64(n) >= int64(len(l)) {
		return n, io.EOF
	}
	return n, nil
}

// fileInfo is an agent.Entry as an os.FileInfo.
type fileInfo struct{ e agent.Entry }

func (f fileInfo) Name() string       { return f.e.Name }
func (f fileInfo) Size() int64        { return f.e.Size }
func (f fileInfo) Mode() fs.FileMode  { return fs.FileMode(f.e.Mode) }
func (f fileInfo) ModTime() time.Time { return time.Unix(f.e.ModTime, 0) }
func (f fileInfo) IsDir() bool        { return f.Mode().IsDir() }
func (f fileInfo) Sys() any           { return nil }
