//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// doctorReport is `doctor --json`, GET /doctor's data.
type doctorReport struct {
	Checks []struct {
		Name    string `json:"name"`
		Status  string `json:"status"`
		Message string `json:"message"`
		Enables string `json:"enables"`
		Fix     string `json:"fix"`
	} `json:"checks"`
	Healthy   bool     `json:"healthy"`
	Backend   string   `json:"backend"`
	Rootless  bool     `json:"rootless"`
	Isolation string   `json:"isolation"`
	Degraded  []string `json:"degraded"`
	Refused   []string `json:"refused"`
	Why       string   `json:"why"`
}

// status is the named check's status ("" when absent).
func (d *doctorReport) status(name string) string {
	for _, c := range d.Checks {
		if c.Name == name {
			return c.Status
		}
	}
	return ""
}

// doctor runs `doctor --json` as a and decodes it; exit 0 means healthy.
func (a *ak) doctor() *doctorReport {
	a.t.Helper()
	r := a.run("doctor", "--json")
	var d doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		a.t.Fatalf("doctor --json: %v: %v", err, r)
	}
	if (r.code == 0) != d.Healthy || r.code != 0 && r.code != 1 {
		a.t.Errorf("doctor exit %d with healthy %v", r.code, d.Healthy)
	}
	if len(d.Checks) == 0 || d.Checks[len(d.Checks)-1].Name != "backend" || d.Backend != "native" {
		a.t.Errorf("doctor: no backend verdict last: %+v", d)
	}
	return &d
}

// checkDoctorAnswer checks GET /doctor's answer: the envelope around the
// report, whose healthy agrees with its checks.
func checkDoctorAnswer(t *testing.T, r rawResp) {
	t.Helper()
	r.expect200(t, "doctor")
	var d doctorReport
	if err := json.Unmarshal(r.env["data"], &d); err != nil || len(d.Checks) == 0 {
		t.Fatalf("doctor: %v %s", err, r.body)
	}
	errs := 0
	for _, c := range d.Checks {
		if c.Status == "error" {
			errs++
		}
	}
	if d.Healthy != (errs == 0) || d.Checks[len(d.Checks)-1].Name != "backend" || d.Isolation == "" {
		t.Errorf("doctor: healthy %v with %d errors: %s", d.Healthy, errs, r.body)
	}
}

// TestDoctorVerdicts: what `doctor --json` says of cgroups is what a run
// with a memory limit then does, as root and rootless: held to the limit
// (OOM-killed, with the message), refused (125, naming allow_degraded and
// the systemd-run fix), or run without it after one warning where the
// user's config allows; a project's agentkernel.toml cannot allow it.
func TestDoctorVerdicts(t *testing.T) {
	alloc := []string{"run", "--image", "host", "--memory", "32m", "--", "sh", "-c", `x=$(head -c 100000000 /dev/zero | tr '\0' a); echo ${#x}`}

	root := newAK(t)
	rd := root.doctor()
	if rd.Rootless {
		t.Fatalf("root's report says rootless")
	}
	switch rd.status("cgroups") {
	case "ok":
		if r := root.run(alloc...); r.code != 137 || !strings.Contains(r.stderr, "out of memory") {
			t.Errorf("root, doctor says cgroups ok, but a run past its limit: %v", r)
		}
		if rd.Isolation != "full" {
			t.Errorf("root: isolation %q (%s)", rd.Isolation, rd.Why)
		}
	default:
		t.Errorf("root: cgroups %q here (the test host gives root cgroups)", rd.status("cgroups"))
	}

	a, _ := rootlessAK(t)
	userConf := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
	if err := os.Remove(userConf); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	d := a.doctor()
	if !d.Rootless || d.status("user_namespaces") != "ok" || d.status("seccomp") != "ok" {
		t.Fatalf("rootless report: %+v", d)
	}
	switch d.status("cgroups") {
	case "ok":
		t.Logf("a cgroup is delegated to the rootless user here: the refusal is not checked")
		if r := a.run(alloc...); r.code != 137 {
			t.Errorf("rootless, doctor says cgroups ok, but a run past its limit: %v", r)
		}
		return
	case "error":
	default:
		t.Fatalf("rootless cgroups: %q", d.status("cgroups"))
	}
	if d.Isolation != "refused" || d.Healthy || len(d.Refused) != 1 || d.Refused[0] != "cgroups" {
		t.Errorf("rootless without delegation: %+v", d)
	}
	r := a.run("run", "--image", "host", "--memory", "32m", "--", "echo", "RAN")
	if r.code != 125 || strings.Contains(r.stdout, "RAN") ||
		!strings.Contains(r.stderr, `allow_degraded = ["cgroups"]`) || !strings.Contains(r.stderr, "systemd-run --user --scope -p Delegate=yes") {
		t.Errorf("rootless without delegation, doctor says refused, but the run: %v", r)
	}

	// A project's agentkernel.toml may not allow it.
	if err := os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("[security]\nallow_degraded = [\"cgroups\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d := a.doctor(); d.Isolation != "refused" {
		t.Errorf("a project file allowed degrading: %+v", d)
	}
	if r := a.run("run", "--image", "host", "--memory", "32m", "--", "echo", "RAN"); r.code != 125 || !strings.Contains(r.stderr, "allow_degraded is ignored in a project's agentkernel.toml") {
		t.Errorf("a project file allowed degrading: %v", r)
	}
	if err := os.Remove(filepath.Join(a.dir, "agentkernel.toml")); err != nil {
		t.Fatal(err)
	}

	// The user's own config allows it: degraded, one warning per run.
	allowDegradedCgroups(t, a)
	d = a.doctor()
	if d.status("cgroups") != "warning" || d.Isolation != "degraded" || !d.Healthy {
		t.Errorf("allowed: %+v", d)
	}
	r = a.run("run", "--image", "host", "--memory", "32m", "--", "echo", "RAN")
	if r.code != 0 || r.stdout != "RAN\n" || strings.Count(r.stderr, "allow_degraded allows") != 1 {
		t.Errorf("allowed, doctor says degraded, but the run: %v", r)
	}
	// `status` agrees.
	if r := a.run("status"); r.code != 0 || !strings.Contains(r.stdout, "isolation degraded") || !strings.Contains(r.stdout, "ready to use") {
		t.Errorf("status: %v", r)
	}
}

// allowDegradedCgroups writes the user's config allowing runs without
// cgroup limits ([security] allow_degraded), for a rootless user the host
// delegates no cgroup to.
func allowDegradedCgroups(t *testing.T, a *ak) {
	t.Helper()
	p := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("[security]\nallow_degraded = [\"cgroups\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(a.home, ".config"), filepath.Dir(p)} {
		_ = os.Chmod(d, 0o755)
	}
}

// TestSetupStatus: status says what is missing, setup makes the data
// directory and installs $SHELL's completion in the user's own
// directories, then status says agentkernel is ready.
func TestSetupStatus(t *testing.T) {
	a := newAK(t)
	a.dataDir = filepath.Join(a.home, "data")
	a.env = []string{"SHELL=/bin/bash"}
	if r := a.run("status"); r.code != 1 || !strings.Contains(r.stdout, "not created") || !strings.Contains(r.stdout, "agentkernel setup") {
		t.Errorf("status before setup: %v", r)
	}
	r := a.run("setup")
	comp := filepath.Join(a.home, ".local", "share", "bash-completion", "completions", "agentkernel")
	if r.code != 0 || !strings.Contains(r.stdout, "ready to use") || !strings.Contains(r.stdout, comp) {
		t.Fatalf("setup: %v", r)
	}
	if st, err := os.Stat(a.dataDir); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Errorf("data dir: %v %v", st, err)
	}
	if b, err := os.ReadFile(comp); err != nil || !strings.Contains(string(b), "__start_agentkernel") {
		t.Errorf("completion script: %v %.200s", err, b)
	}
	if r := a.run("status"); r.code != 0 || !strings.Contains(r.stdout, "ready to use") || !strings.Contains(r.stdout, comp) || !strings.Contains(r.stdout, "isolation full") {
		t.Errorf("status after setup: %v", r)
	}
	// Another shell: nothing written, the way to do it said.
	a.env = []string{"SHELL=/usr/bin/tcsh"}
	if r := a.run("setup"); r.code != 0 || !strings.Contains(r.stdout, `not installed for shell "tcsh"`) {
		t.Errorf("setup for tcsh: %v", r)
	}
}
