package asciicast

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Ext is a recording file's extension.
const Ext = ".cast"

// Dir is where recordings go by default: <data-dir>/recordings.
func Dir(dataDir string) string { return filepath.Join(dataDir, "recordings") }

// FileName is the default name of a recording of sandbox begun at t:
// <sandbox>-YYYYMMDD-HHMMSS.cast, in UTC.
func FileName(sandbox string, t time.Time) string {
	return sandbox + "-" + t.UTC().Format("20060102-150405") + Ext
}

// Path is the file a recording of sandbox begun at t goes to, given
// arg: "" is FileName in Dir(dataDir), an existing directory FileName
// in it, anything else the file itself.
func Path(arg, dataDir, sandbox string, t time.Time) string {
	if arg == "" {
		return filepath.Join(Dir(dataDir), FileName(sandbox, t))
	}
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		return filepath.Join(arg, FileName(sandbox, t))
	}
	return arg
}

// Create makes the recording file path, readable by its owner alone
// (0600), and its directory (0700) when that is missing. It never
// follows a symbolic link, and never writes over a file: a recording is
// not lost to the next one.
func Create(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("recording %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		return nil, fmt.Errorf("recording %s: the file exists (a recording is never written over): name another file, or a directory", path)
	case err != nil:
		return nil, fmt.Errorf("recording %s: %w", path, err)
	}
	return f, nil
}
