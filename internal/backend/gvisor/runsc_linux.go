package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// getRunsc says how to get a runsc this backend can use.
const getRunsc = "build one with scripts/runsc.sh (go install gvisor.dev/gvisor/runsc@" + RunscVersion + ") or set " + RunscEnv + " to a runsc from gVisor's 2023 releases or later"

// oldestRelease is the first gVisor release date this backend accepts:
// systrap, the platform it runs on, became usable then.
const oldestRelease = 20230601

// findRunsc returns the runsc to run: $AGENTKERNEL_RUNSC (which must
// work when set), else the one scripts/runsc.sh built, else runsc in
// PATH.
func findRunsc() (string, error) {
	if p := os.Getenv(RunscEnv); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", RunscEnv, p, err)
		}
		return p, nil
	}
	if p := RunscCachePath(); executable(p) == nil {
		return p, nil
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("runsc (gVisor) not found: not in %s nor PATH, and %s is not set; %s", filepath.Dir(RunscCachePath()), RunscEnv, getRunsc)
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// checkRunsc makes sure runsc at p is recent enough, once per binary:
// the verdict is kept in dir (the path, size and modification time of
// the runsc that passed), so a run costs a stat and a small read.
func checkRunsc(ctx context.Context, p, dir string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	stamp := fmt.Sprintf("%s\n%d\n%d\n", p, st.Size(), st.ModTime().UnixNano())
	okFile := filepath.Join(dir, "runsc-checked")
	if b, err := os.ReadFile(okFile); err == nil && string(b) == stamp {
		return nil
	}
	var version string
	if err := checkRunscVersion(ctx, p, &version); err != nil {
		return err
	}
	tmp := okFile + ".tmp"
	if os.WriteFile(tmp, []byte(stamp), 0o600) == nil {
		_ = os.Rename(tmp, okFile)
	}
	return nil
}

var releaseRE = regexp.MustCompile(`release-(\d{8})`)

// tooOld reads `runsc --version`: a release before oldestRelease is too
// old (with its name); a build without a release name (go install
// leaves VERSION_MISSING) is taken as current.
func tooOld(version string) (string, bool) {
	first, _, _ := strings.Cut(version, "\n")
	m := releaseRE.FindStringSubmatch(first)
	if m == nil {
		return "", false
	}
	d, _ := strconv.Atoi(m[1])
	return "release-" + m[1], d < oldestRelease
}

// checkRunscVersion runs `runsc --version` (30 s at most), puts its
// first line in version and fails for a runsc too old for this backend.
func checkRunscVersion(ctx context.Context, p string, version *string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w; %s", p, err, getRunsc)
	}
	*version = firstLine(string(out))
	if v, ok := tooOld(string(out)); ok {
		return fmt.Errorf("runsc at %s is too old (%s): the gvisor backend needs the systrap platform; %s", p, v, getRunsc)
	}
	return nil
}
