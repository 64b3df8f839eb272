package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// tooOld reads `runsc --version`: a release before oldestRelease is too
// old (with its name); a build without a release name (go install
// leaves VERSION_MISSING) is taken as current. The release is the first
// "release-" of the first line followed by eight ASCII digits (read by
// hand: this package is linked into the agentkernel binary, which links
// no regexp).
func tooOld(version string) (string, bool) {
	first, _, _ := strings.Cut(version, "\n")
	date, ok := releaseDate(first)
	if !ok {
		return "", false
	}
	d, _ := strconv.Atoi(date)
	return "release-" + date, d < oldestRelease
}

// releaseDate is the YYYYMMDD of the first "release-" in line followed
// by eight ASCII digits.
func releaseDate(line string) (string, bool) {
	const prefix = "release-"
	for {
		i := strings.Index(line, prefix)
		if i < 0 {
			return "", false
		}
		line = line[i+len(prefix):]
		if len(line) >= 8 && allDigits(line[:8]) {
			return line[:8], true
		}
	}
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
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
