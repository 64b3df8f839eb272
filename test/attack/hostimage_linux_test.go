//go:build linux

package attack

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// hostImageProbes run against the "host" image (the host's own /usr,
// /bin, /lib*, /etc bound read-only with its secrets masked), which the
// Manager falls back to when an auto-detected image cannot be pulled.
var hostImageProbes = []string{"host_secrets", "read_host_canary", "write_root", "proc_sys_write", "dev_inventory", "fd_leak"}

// hostImageChecks runs hostImageProbes in the moderate profile on the
// host image, with the probes bound read-only at /probes. As in the
// battery, a "blocked" counts where the probe's positive control reached
// its target; where the control found none it is "not applicable".
func hostImageChecks(t *testing.T, r *runner, ctrls map[string]*outcome) []hostCheck {
	t.Helper()
	var checks []hostCheck
	for _, probe := range hostImageProbes {
		spec := r.spec("moderate", probe)
		spec.Rootfs = image.Rootfs{Ref: "host", Host: true}
		spec.Mounts = append(spec.Mounts, sandbox.Mount{Kind: sandbox.MountBind, Source: r.f.probesDir, Dest: "/probes", ReadOnly: true})
		spec.Env = append(spec.Env, "ATTACK_HOST_IMAGE=1")
		var out tailWriter
		out.max = 16 << 10
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := r.backend.Run(ctx, spec, sandbox.Stdio{Stdin: nil, Stdout: &out, Stderr: &out})
		cancel()
		rep, ok := parseReport(out.String())
		detail := rep.Detail
		switch {
		case !ok:
			detail = fmt.Sprintf("no report: exit %d, err %v, output %q", res.ExitCode, err, lastLines(out.String(), 3))
		case probe == "write_root" && rep.Result == allowed:
			// The host image's root is a tmpfs of the sandbox's own; only
			// the bound host directories must be read-only.
			detail = "root tmpfs writable (the sandbox's own); " + detail
		}
		pass := ok && (rep.Result == blocked || probe == "write_root")
		if probe == "write_root" && ok && rep.Result == allowed {
			pass = !containsAny(rep.Detail, "/bin/", "/etc/", "/usr/")
		}
		na := false
		if c := ctrls[probe]; probe != "write_root" {
			switch {
			case controlProblem(c, kindOf(r.f.mode)) != "":
				pass, detail = false, controlProblem(c, kindOf(r.f.mode))
			case c.Result == notApp && ok && (rep.Result == blocked || rep.Result == notApp):
				na, detail = true, "not applicable: "+c.Detail
			}
		}
		checks = append(checks, hostCheck{Name: "host image (moderate): " + probe, OK: pass, NA: na, Detail: truncate(detail, 400)})
	}
	return checks
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
