// Package clustercli holds what the command lines of the orchestrator
// backends (kubecli for -B kubernetes, nomadcli for -B nomad) share: the
// name of a run's sandbox, and cp (Copy over a backend's Files).
package clustercli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// MaxCopy is the largest file cp moves: it goes through the cluster's
// exec API, in memory.
const MaxCopy = 64 << 20

// RunName is a fresh sandbox name for a run: "run-" and 10 hex digits.
func RunName() (string, error) {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "run-" + hex.EncodeToString(b[:]), nil
}

// SplitRemote splits cp's NAME:PATH; a word with a slash before its
// colon, or none, is a local path.
func SplitRemote(s string) (name, path string, remote bool) {
	n, p, ok := strings.Cut(s, ":")
	if !ok || n == "" || strings.Contains(n, "/") {
		return "", s, false
	}
	return n, p, true
}

// CopySides checks that exactly one of cp's SRC and DST is in a sandbox.
func CopySides(src, dst string) (remoteDst bool, err error) {
	_, _, srcIn := SplitRemote(src)
	_, _, dstIn := SplitRemote(dst)
	if srcIn == dstIn {
		return false, fmt.Errorf("cp: exactly one of SRC and DST is NAME:PATH in a sandbox")
	}
	return dstIn, nil
}

// ReadLocal reads cp's local SRC: a regular file of at most MaxCopy
// bytes.
func ReadLocal(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cp: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("cp: %s is not a regular file", path)
	}
	if st.Size() > MaxCopy {
		return nil, fmt.Errorf("cp: %s is %d bytes, more than the %d a cluster backend copies", path, st.Size(), MaxCopy)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cp: %w", err)
	}
	return data, nil
}

// RemoteTarget is the path in the sandbox a local file goes to: a
// DST ending in "/" receives it under its own name.
func RemoteTarget(dstPath, local string) string {
	if strings.HasSuffix(dstPath, "/") {
		return dstPath + filepath.Base(local)
	}
	return dstPath
}

// WriteLocal writes what cp read from remotePath to the local DST (a
// directory receives it under its own name).
func WriteLocal(dst, remotePath string, data []byte) error {
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, filepath.Base(remotePath))
	}
	return os.WriteFile(dst, data, 0o644)
}

// Files is what cp needs of a backend: one file written into a sandbox,
// or read out of it up to a limit.
type Files interface {
	WriteFile(ctx context.Context, name, path string, data []byte) error
	ReadFile(ctx context.Context, name, path string, limit int64) ([]byte, error)
}

// Copy is cp SRC DST for a cluster backend: exactly one side NAME:PATH,
// one regular file of at most MaxCopy bytes either way.
func Copy(ctx context.Context, f Files, src, dst string) error {
	remoteDst, err := CopySides(src, dst)
	if err != nil {
		return err
	}
	if remoteDst {
		data, err := ReadLocal(src)
		if err != nil {
			return err
		}
		name, path, _ := SplitRemote(dst)
		return f.WriteFile(ctx, name, RemoteTarget(path, src), data)
	}
	name, path, _ := SplitRemote(src)
	data, err := f.ReadFile(ctx, name, path, MaxCopy)
	if err != nil {
		return err
	}
	return WriteLocal(dst, path, data)
}
