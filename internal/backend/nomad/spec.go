package nomad

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Drivers: DriverAgentkernel (the default) runs the node's agentkernel
// under Nomad's raw_exec driver, which isolates the sandbox with the
// native backend; DriverExec uses Nomad's own exec driver (chroot,
// namespaces and cgroups by Nomad). raw_exec by itself isolates nothing
// and is refused for sandboxes.
const (
	DriverAgentkernel = "agentkernel"
	DriverExec        = "exec"
)

// Profiles, as the native backend names them.
var profiles = map[string]bool{"permissive": true, "moderate": true, "restrictive": true}

// Networks: NetworkNone is loopback only; NetworkFiltered lets the
// sandbox reach AllowDomains only (the node's agentkernel enforces it);
// NetworkFull is unrestricted egress.
const (
	NetworkNone     = "none"
	NetworkFiltered = "filtered"
	NetworkFull     = "full"
)

// Request is one sandbox to create.
type Request struct {
	Name    string
	Image   string // for the node's agentkernel; "" is its default
	Profile string // "" is moderate
	Network string // "" is the profile's
	// AllowDomains, with NetworkFiltered, are the host names the sandbox
	// may reach.
	AllowDomains []string
	MemoryMB     int           // Nomad's reservation and the sandbox's limit; 0: 256
	CPUMHz       int           // Nomad's CPU shares; 0: 100
	TTL          time.Duration // > 0: ExpiresMeta = Now+TTL, then Reap removes it
	Labels       map[string]string
	// Owner, when set, is OwnerMeta.
	Owner string
}

// Check refuses a request that cannot become a job, before any request
// is sent: every field ends up in a job spec or on a command line.
func (r *Request) Check(driver string) error {
	if err := ValidName(r.Name); err != nil {
		return err
	}
	if r.Profile != "" && !profiles[r.Profile] {
		return fmt.Errorf("profile %q: use permissive, moderate or restrictive", r.Profile)
	}
	switch r.Network {
	case "", NetworkNone, NetworkFull:
		if len(r.AllowDomains) > 0 {
			return fmt.Errorf("allowed domains need --network filtered")
		}
	case NetworkFiltered:
		if driver != DriverAgentkernel {
			return fmt.Errorf("network filtered needs the agentkernel driver: Nomad's %s driver cannot filter by name", driver)
		}
		if len(r.AllowDomains) == 0 {
			return fmt.Errorf("network filtered needs at least one allowed domain")
		}
		for _, d := range r.AllowDomains {
			if err := checkDomain(d); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("network %q: use none, filtered or full", r.Network)
	}
	if r.Image != "" && (strings.HasPrefix(r.Image, "-") || strings.ContainsAny(r.Image, " \t\n\x00")) {
		return fmt.Errorf("image %q is not an image reference", r.Image)
	}
	if r.MemoryMB < 0 || r.MemoryMB > 1<<20 || r.CPUMHz < 0 || r.CPUMHz > 1<<20 {
		return fmt.Errorf("memory and cpu must be positive and sane")
	}
	if len(r.Owner) > 128 || strings.ContainsAny(r.Owner, "\x00\n") {
		return fmt.Errorf("owner %.20q… is not a sandbox id", r.Owner)
	}
	if r.TTL < 0 {
		return fmt.Errorf("ttl must be positive")
	}
	for k, v := range r.Labels {
		if err := validLabelKey(k); err != nil {
			return err
		}
		if len(v) > 256 || strings.ContainsAny(v, "\x00\n") {
			return fmt.Errorf("label %s: value too long or has a newline", k)
		}
	}
	return nil
}

func checkDomain(d string) error {
	h := strings.TrimPrefix(d, "*.")
	if h == "" || len(h) > 253 || strings.HasPrefix(h, "-") {
		return fmt.Errorf("allowed domain %q is not a host name", d)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("allowed domain %q is not a host name", d)
		}
	}
	return nil
}

// jobOptions are the backend's settings a job needs.
type jobOptions struct {
	Namespace, Region string
	Datacenters       []string
	Driver            string
	// NodeAgentkernel is the agentkernel binary on the nodes, and
	// NodeDataDir its --data-dir ("" its default).
	NodeAgentkernel, NodeDataDir string
	// ExecCommand is what the exec driver's task runs to idle.
	ExecCommand []string
}

// nodeScript makes and runs the sandbox with the node's agentkernel
// (`sandbox create --start`), then stays in the foreground while its
// supervisor runs, so that the task lives exactly as long as the
// sandbox; when the task ends (deregistered, or the sandbox stopped) it
// removes the sandbox (a task stopped while the sandbox is being made
// lets that finish first, so that nothing of it is left on the node).
// While it waits it checks the supervisor's pid
// every second (a shell builtin) and asks the node's agentkernel for the
// sandbox's status every 30 seconds only: a waiting job, a warm pool's
// above all, costs no process start a second. Its only inputs are
// positional parameters and environment variables (AK_BIN, AK_DATA_DIR,
// AK_NAME), never spliced into the script.
const nodeScript = `ak() { if [ -n "$AK_DATA_DIR" ]; then "$AK_BIN" --data-dir "$AK_DATA_DIR" "$@"; else "$AK_BIN" "$@"; fi; }; ` +
	`trap 'if [ -n "$cpid" ]; then wait "$cpid"; fi; ak sandbox remove --force "$AK_NAME" >/dev/null 2>&1' EXIT; trap 'exit 143' TERM INT; ` +
	`ak "$@" --start >/dev/null & cpid=$!; wait "$cpid" || exit 125; cpid=; ` +
	`running() { ak sandbox info --json "$AK_NAME" 2>/dev/null | grep -q '"status": "running"'; }; ` +
	`pid=$(ak sandbox info --json "$AK_NAME" 2>/dev/null | sed -n 's/^ *"supervisor_pid": *\([0-9][0-9]*\).*/\1/p'); i=0; ` +
	`while :; do if [ -n "$pid" ] && [ $((i % 30)) -ne 0 ]; then kill -0 "$pid" 2>/dev/null || running || break; else running || break; fi; i=$((i + 1)); sleep 1 & wait $!; done`

// createArgs is the node's `agentkernel sandbox create` command line.
func createArgs(r *Request) []string {
	create := []string{"sandbox", "create", r.Name}
	if r.Profile != "" {
		create = append(create, "--profile", r.Profile)
	}
	if r.Image != "" {
		create = append(create, "--image", r.Image)
	}
	if r.Network != "" {
		create = append(create, "--network", r.Network)
	}
	for _, d := range r.AllowDomains {
		create = append(create, "--allow-domain", d)
	}
	if r.MemoryMB > 0 {
		create = append(create, "--memory", fmt.Sprintf("%dm", r.MemoryMB))
	}
	return create
}

func buildJob(o jobOptions, r *Request, now time.Time) *api.Job {
	id := JobID(r.Name)
	meta := map[string]string{
		ManagedMeta: ManagedValue,
		SandboxMeta: r.Name,
		ProfileMeta: r.Profile,
		NetworkMeta: r.Network,
		DriverMeta:  o.Driver,
	}
	if r.Owner != "" {
		meta[OwnerMeta] = r.Owner
	}
	if r.TTL > 0 {
		meta[ExpiresMeta] = now.Add(r.TTL).UTC().Format(time.RFC3339)
	}
	for k, v := range r.Labels {
		meta[LabelMetaPrefix+k] = v
	}
	mem, cpu := r.MemoryMB, r.CPUMHz
	if mem == 0 {
		mem = 256
	}
	if cpu == 0 {
		cpu = 100
	}
	task := &api.Task{
		Name:      TaskName,
		Resources: &api.Resources{CPU: &cpu, MemoryMB: &mem},
		Env:       map[string]string{"AK_NAME": r.Name},
	}
	kill := 5 * time.Second
	task.KillTimeout = &kill
	grp := &api.TaskGroup{Name: ptr(TaskName), Count: ptr(1), Tasks: []*api.Task{task}}
	switch o.Driver {
	case DriverExec:
		task.Driver = "exec"
		task.Config = map[string]any{"command": o.ExecCommand[0], "args": o.ExecCommand[1:]}
		mode := "host"
		if r.Network == NetworkNone || r.Network == "" && r.Profile == "restrictive" {
			mode = "none"
		}
		grp.Networks = []*api.NetworkResource{{Mode: mode}}
	default:
		task.Driver = "raw_exec"
		task.Env["AK_BIN"] = o.NodeAgentkernel
		if o.NodeDataDir != "" {
			task.Env["AK_DATA_DIR"] = o.NodeDataDir
		}
		task.Config = map[string]any{"command": "/bin/sh", "args": append([]string{"-c", nodeScript, "sh"}, createArgs(r)...)}
	}
	// A sandbox lives exactly as long as its task: no restart, no
	// rescheduling elsewhere.
	grp.RestartPolicy = &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	grp.ReschedulePolicy = &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	job := &api.Job{
		ID:          &id,
		Name:        &id,
		Type:        ptr("batch"),
		Namespace:   ptr(o.Namespace),
		Meta:        meta,
		TaskGroups:  []*api.TaskGroup{grp},
		Datacenters: o.Datacenters,
	}
	if o.Region != "" {
		job.Region = ptr(o.Region)
	}
	return job
}

func ptr[T any](v T) *T { return &v }

// labelsOf reads the user labels back from a job's meta.
func labelsOf(meta map[string]string) map[string]string {
	out := map[string]string{}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, LabelMetaPrefix) {
			out[strings.TrimPrefix(k, LabelMetaPrefix)] = meta[k]
		}
	}
	return out
}
