// Package fullbin finds agentkernel-full, the binary with the whole
// command line, from either binary: the agentkernel binary hands it the
// commands it does not serve itself, and both start it as a sandbox's
// network stack (package netproc).
package fullbin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// KubeName is the file name of the binary that serves -B kubernetes.
const KubeName = "agentkernel-kube"

// KubePath is agentkernel-kube's path: beside this binary (symlinks
// resolved), else in ../libexec/agentkernel/.
func KubePath() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find %s: %w", KubeName, err)
	}
	if real, err := filepath.EvalSymlinks(self); err == nil {
		self = real
	}
	dir := filepath.Dir(self)
	candidates := []string{
		filepath.Join(dir, KubeName),
		filepath.Join(dir, "..", "libexec", "agentkernel", KubeName),
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("-B kubernetes needs %s, which is not installed beside %s (looked for %s)", KubeName, self, candidates[0])
}

// WantsKube reports whether a command line (without the program name)
// is a sandbox command that names the kubernetes backend: -B kubernetes
// (or k8s) in any of its spellings, with `sandbox` or one of its flat
// forms (create, list, ls, ps, remove, rm, exec), run or cp as the
// command, or the backend's own commands (pool, crds, controller). agentkernel-full
// hands such a command line to agentkernel-kube whole.
func WantsKube(args []string) bool { return wantsBackend(args, "kubernetes", "k8s") }

// WantsNomad is WantsKube for -B nomad: such a command line is served by
// agentkernel-full's nomad command line (package nomadcli).
func WantsNomad(args []string) bool { return wantsBackend(args, "nomad") }

// wantsBackend reports whether args name one of names with -B and a
// command the orchestrator backends serve.
func wantsBackend(args []string, names ...string) bool {
	kube, cmd := false, ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		var v string
		switch {
		case a == "-B" || a == "--backend":
			if i+1 < len(args) {
				v = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--backend="):
			v = strings.TrimPrefix(a, "--backend=")
		case strings.HasPrefix(a, "-B") && len(a) > 2:
			v = strings.TrimPrefix(strings.TrimPrefix(a, "-B"), "=")
		case a == "-c" || a == "--config" || a == "--data-dir" || a == "--log-level":
			i++ // the global flags that take a value: skip it
		case cmd == "" && !strings.HasPrefix(a, "-"):
			cmd = a
		}
		for _, n := range names {
			if v == n {
				kube = true
			}
		}
	}
	switch cmd {
	case "sandbox", "create", "list", "ls", "ps", "remove", "rm", "exec", "run", "cp", "pool", "crds", "controller":
		return kube
	}
	return false
}
