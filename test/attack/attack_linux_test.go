//go:build linux

package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite RESULTS.md from this run")

// rootlessUser is the unprivileged account the root run creates for the
// rootless variant.
const rootlessUser = "akattack"

// Environment of the rootless variant's inner process.
const (
	envInner   = "ATTACK_INNER"   // "rootless": run the battery and write JSON
	envOut     = "ATTACK_OUT"     // where the inner process writes its results
	envProbes  = "ATTACK_PROBES"  // the built probes (readable by the user)
	envRootRun = "ATTACK_ROOTRUN" // set when a root run started the inner one
)

// TestMain lets this test binary serve as the sandbox's init: the native
// backend re-executes /proc/self/exe with a hidden argv[0].
func TestMain(m *testing.M) {
	if native.IsInit() {
		os.Exit(native.InitMain())
	}
	os.Exit(m.Run())
}

// modePool is the root battery run through prepared sandboxes.
const modePool = "root-pool"

// TestAttack runs the battery: as root (when run as root) and rootless
// (as a user the test creates, or as the caller when not root), then
// checks every outcome against the expectation table and the probes'
// positive controls and, with -update, rewrites RESULTS.md.
// ATTACK_ONLY=probe,probe limits the battery to those probes (for
// investigating; never with -update).
func TestAttack(t *testing.T) {
	if os.Getenv(envInner) != "" {
		t.Skip("inner process of the rootless variant")
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the probes are built for linux/amd64 and arm64")
	}
	start := time.Now()
	probes := buildProbes(t)
	var all []*modeResults
	if os.Geteuid() == 0 {
		res := battery(t, "root", probes, nil)
		all = append(all, res)
		t.Logf("root battery: %v", res.Took.Round(time.Millisecond))
		// The same sandboxes as a warm pool (the daemon, fast API
		// runs) builds them: prepared first, command and stdio later.
		// The same kind of user: root's positive controls hold.
		pool := battery(t, modePool, probes, res.Controls)
		all = append(all, pool)
		t.Logf("%s battery: %v", modePool, pool.Took.Round(time.Millisecond))
		rl, err := rootlessFromRoot(t, probes)
		switch {
		case errors.Is(err, errRootless):
			// A missing prerequisite: a failure under the suite, a
			// skip of the rootless part otherwise.
			t.Run("rootless", func(t *testing.T) { testenv.Missing(t, "the rootless battery: %v", err) })
		case err != nil:
			t.Errorf("rootless battery: %v", err)
		default:
			all = append(all, rl)
		}
	} else {
		// The root and root-pool batteries need root: a failure under
		// the suite, a skip of that part otherwise.
		t.Run("root", func(t *testing.T) { testenv.RequireRoot(t) })
		all = append(all, battery(t, "rootless", probes, nil))
	}
	for _, res := range all {
		assertResults(t, res)
	}
	t.Logf("battery took %v", time.Since(start).Round(time.Millisecond))
	if *update {
		if os.Getenv("ATTACK_ONLY") != "" {
			t.Fatal("-update with ATTACK_ONLY would write a partial RESULTS.md")
		}
		writeResults(t, all)
	}
}

// TestAttackRootlessInner is the rootless battery when a root run starts
// this binary again as an unprivileged user; it writes its results as
// JSON for the root run to check.
func TestAttackRootlessInner(t *testing.T) {
	if os.Getenv(envInner) != "rootless" {
		t.Skip("runs only as the inner process of TestAttack's rootless variant")
	}
	res := battery(t, "rootless", os.Getenv(envProbes), nil)
	b, err := json.Marshal(res)
	must(t, err)
	must(t, os.WriteFile(os.Getenv(envOut), b, 0o644))
}

// buildProbes compiles every probe (static, CGO_ENABLED=0) into a
// directory readable by everyone.
func buildProbes(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir, err := os.MkdirTemp("", "attack-probes-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", dir+"/", "./probes/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building probes: %v\n%s", err, out)
	}
	ents, err := os.ReadDir(dir)
	must(t, err)
	if len(ents) < 40 {
		t.Fatalf("only %d probes built", len(ents))
	}
	return dir
}

// rootlessFromRoot creates an unprivileged user and runs this test binary
// as that user (setpriv), which runs the same battery rootless and hands
// back its results.
func rootlessFromRoot(t *testing.T, probes string) (*modeResults, error) {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return nil, fmt.Errorf("%w: setpriv (util-linux) not found", errRootless)
	}
	u, err := user.Lookup(rootlessUser)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", rootlessUser).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%w: useradd %s: %v %s", errRootless, rootlessUser, err, out)
		}
		if u, err = user.Lookup(rootlessUser); err != nil {
			return nil, fmt.Errorf("%w: %v", errRootless, err)
		}
	}
	dir, err := os.MkdirTemp("", "attack-rootless-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o777))
	self, err := os.Executable()
	must(t, err)
	bin := filepath.Join(dir, "attack.test")
	b, err := os.ReadFile(self)
	must(t, err)
	must(t, os.WriteFile(bin, b, 0o755))
	out := filepath.Join(dir, "results.json")

	cmd := exec.Command(setpriv, "--reuid="+u.Uid, "--regid="+u.Gid, "--clear-groups", "--pdeathsig=SIGKILL",
		bin, "-test.run=^TestAttackRootlessInner$", "-test.v", "-test.timeout=360s")
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "ATTACK_ONLY=" + os.Getenv("ATTACK_ONLY"),
		envInner + "=rootless", envOut + "=" + out, envProbes + "=" + probes, envRootRun + "=1",
		// Strict mode holds in the inner battery too: a prerequisite it
		// lacks fails there as it would here.
		testenv.StrictEnv + "=" + os.Getenv(testenv.StrictEnv),
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	runErr := cmd.Run()
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "--- ") || strings.Contains(l, "_test.go") || strings.Contains(l, "panic") {
			t.Log("rootless: " + l)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Errorf("rootless variant produced no results (%v):\n%s", runErr, lastLines(buf.String(), 40))
		return nil, fmt.Errorf("rootless variant failed: %v", runErr)
	}
	var res modeResults
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// assertResults compares one battery with the expectation table and the
// probes' positive controls.
func assertResults(t *testing.T, res *modeResults) {
	t.Helper()
	for _, w := range res.Warnings {
		t.Logf("%s: backend warning: %s", res.Mode, w)
	}
	for probe, byProfile := range res.Outcomes {
		ctrl := res.Controls[probe]
		if p := controlProblem(ctrl, kindOf(res.Mode)); p != "" {
			t.Errorf("%s/%s: %s", res.Mode, probe, p)
			continue
		}
		if testing.Verbose() {
			t.Logf("%s/%s: control %s: %s", res.Mode, probe, ctrl.Result, truncate(ctrl.Detail, 200))
		}
		for _, prof := range profiles {
			o := byProfile[prof]
			if o == nil {
				t.Errorf("%s/%s/%s: did not run", res.Mode, prof, probe)
				continue
			}
			want, why := expected(probe, prof, res.Mode)
			if cell, ok := verdict(probe, prof, res.Mode, o, ctrl); !ok {
				t.Errorf("%s/%s/%s: got %s, want %s (%s; control %s): %s [exit %d, err %q]",
					res.Mode, prof, probe, o.Result, want, why, ctrl.Result, o.Detail, o.ExitCode, o.Err)
			} else if testing.Verbose() {
				t.Logf("%s/%s/%s: %s: %s", res.Mode, prof, probe, cell, truncate(o.Detail, 200))
			}
		}
	}
	for _, c := range res.Checks {
		fails, why := checkExpected(res.Mode, c.Name)
		switch {
		case !c.OK && !fails:
			t.Errorf("%s: host check %q failed: %s", res.Mode, c.Name, c.Detail)
		case c.OK && fails && os.Getenv("ATTACK_ONLY") != "":
			t.Logf("%s: host check %q passed in this partial battery (ATTACK_ONLY); internal/contract lists it as failing (%s)", res.Mode, c.Name, why)
		case c.OK && fails:
			t.Errorf("%s: host check %q passed, but internal/contract lists it as failing on %s (%s): remove the row", res.Mode, c.Name, res.Mode, why)
		case fails && testing.Verbose():
			t.Logf("%s: host check %q fails as listed (%s): %s", res.Mode, c.Name, why, c.Detail)
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// TestAttackShell runs one command in the test image for investigating a
// probe by hand, e.g.
//
//	ATTACK_SHELL='ls -l /proc/self/fd' ATTACK_PROFILE=moderate go test ./test/attack/ -run TestAttackShell -v
func TestAttackShell(t *testing.T) {
	cmdline := os.Getenv("ATTACK_SHELL")
	if cmdline == "" {
		t.Skip("set ATTACK_SHELL to a shell command (and ATTACK_PROFILE)")
	}
	profile := os.Getenv("ATTACK_PROFILE")
	if profile == "" {
		profile = "moderate"
	}
	mode := "root"
	if os.Geteuid() != 0 {
		mode = "rootless"
	}
	f := newFixtures(t, mode, buildProbes(t))
	r := newRunner(f)
	spec := r.spec(profile, "shell")
	spec.Args = []string{"/bin/sh", "-c", cmdline}
	spec.User = os.Getenv("ATTACK_USER")
	res, err := r.backend.Run(context.Background(), spec, sandbox.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	t.Logf("exit %d signal %d timed out %v err %v", res.ExitCode, res.Signal, res.TimedOut, err)
}
