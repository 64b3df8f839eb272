package runcli

import (
	"fmt"
	"os"
	"path/filepath"
)

// FullName is the file name of the binary with the whole command line.
const FullName = "agentkernel-full"

// FullPath is agentkernel-full's path: this binary when it is
// agentkernel-full, else the one beside this binary (its real path,
// symlinks resolved), else ../libexec/agentkernel/agentkernel-full from
// there.
func FullPath() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find %s: %w", FullName, err)
	}
	if real, err := filepath.EvalSymlinks(self); err == nil {
		self = real
	}
	if filepath.Base(self) == FullName {
		return self, nil
	}
	dir := filepath.Dir(self)
	candidates := []string{
		filepath.Join(dir, FullName),
		filepath.Join(dir, "..", "libexec", "agentkernel", FullName),
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("this command needs %s, which is not installed beside %s (looked for %s)", FullName, self, candidates[0])
}
