// Package fullbin finds agentkernel-full, the binary with the whole
// command line, from either binary: the agentkernel binary hands it the
// commands it does not serve itself, and both start it as a sandbox's
// network stack (package netproc).
package fullbin

import (
	"fmt"
	"os"
	"path/filepath"
)

// Name is the file name of the binary with the whole command line.
const Name = "agentkernel-full"

// Path is agentkernel-full's path: this binary when it is
// agentkernel-full, else the one beside this binary (its real path,
// symlinks resolved), else ../libexec/agentkernel/agentkernel-full from
// there.
func Path() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find %s: %w", Name, err)
	}
	if real, err := filepath.EvalSymlinks(self); err == nil {
		self = real
	}
	if filepath.Base(self) == Name {
		return self, nil
	}
	dir := filepath.Dir(self)
	candidates := []string{
		filepath.Join(dir, Name),
		filepath.Join(dir, "..", "libexec", "agentkernel", Name),
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("this command needs %s, which is not installed beside %s (looked for %s)", Name, self, candidates[0])
}
