package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"reflect"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// defaultPath is the command's PATH when neither the image nor the spec
// sets one.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// maxNoFile caps the command's open-files limit (the host's hard limit
// caps it further), as native does.
const maxNoFile = 1 << 20

// process is the command as the bundle runs it: everything config.json
// needs that comes from the image and the spec rather than the mounts.
type process struct {
	args    []string
	env     []string
	cwd     string
	uid     int
	gid     int
	groups  []int
	isRoot  bool
	caps    []string
	noFile  uint64
	rootDir string // the bundle's rootfs, mounted
}

// resolveProcess fills the command's args, environment, working
// directory and user from spec and the image mounted at root.
func resolveProcess(spec *sandbox.Spec, root string) (*process, error) {
	p := &process{rootDir: root}
	p.args = spec.Args
	if len(p.args) == 0 {
		p.args = append(append([]string{}, spec.Rootfs.Config.Entrypoint...), spec.Rootfs.Config.Cmd...)
	}
	if len(p.args) == 0 {
		return nil, errors.New("no command given and the image defines none")
	}
	p.cwd = spec.Workdir
	if p.cwd == "" {
		p.cwd = spec.Rootfs.Config.WorkingDir
	}
	if p.cwd == "" {
		p.cwd = "/"
	}
	if !path.IsAbs(p.cwd) {
		return nil, fmt.Errorf("working directory %q is not absolute", p.cwd)
	}
	user := spec.User
	if user == "" {
		user = spec.Rootfs.Config.User
	}
	uid, gid, groups, home, err := native.ResolveUser(root, user)
	if err != nil {
		return nil, err
	}
	p.uid, p.gid, p.groups, p.isRoot = uid, gid, groups, uid == 0
	p.env = withEnv(spec.Rootfs.Config.Env, spec.Env)
	if envIndex(p.env, "PATH") < 0 {
		p.env = append(p.env, defaultPath)
	}
	if envIndex(p.env, "HOME") < 0 {
		p.env = append(p.env, "HOME="+home)
	}
	for _, c := range spec.Security.Capabilities {
		name := strings.ToUpper(c)
		if !strings.HasPrefix(name, "CAP_") {
			name = "CAP_" + name
		}
		if name == "CAP_ALL" {
			return nil, errors.New("capability ALL: the gvisor backend takes capabilities by name")
		}
		p.caps = append(p.caps, name)
	}
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	p.noFile = min(lim.Max, maxNoFile)
	return p, nil
}

// withEnv is the image's environment with spec's KEY=VALUE entries
// replacing or added to it, in order.
func withEnv(image, spec []string) []string {
	out := append([]string{}, image...)
	for _, kv := range spec {
		k, _, _ := strings.Cut(kv, "=")
		if i := envIndex(out, k); i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}

func envIndex(env []string, key string) int {
	for i, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return i
		}
	}
	return -1
}

// ociSpec is config.json for spec: p is the command, mounts the spec's
// mounts as the bundle mounts them (bindMount), cgroup the path runsc
// makes the sandbox's cgroup at ("" without limits).
func ociSpec(spec *sandbox.Spec, p *process, mounts []specs.Mount, cgroup string) *specs.Spec {
	groups := make([]uint32, 0, len(p.groups))
	for _, g := range p.groups {
		groups = append(groups, uint32(g))
	}
	caps := &specs.LinuxCapabilities{Bounding: p.caps}
	if p.isRoot {
		// As setuid leaves them: root keeps its capabilities, another
		// user starts with none (the bounding set still caps what a
		// set-id program may gain, and no_new_privs stops even that).
		caps.Effective, caps.Permitted = p.caps, p.caps
	}
	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: spec.Hostname,
		Root:     &specs.Root{Path: p.rootDir, Readonly: spec.ReadOnlyRoot},
		Process: &specs.Process{
			Args:            p.args,
			Env:             p.env,
			Cwd:             p.cwd,
			User:            specs.User{UID: uint32(p.uid), GID: uint32(p.gid), AdditionalGids: groups},
			Capabilities:    caps,
			NoNewPrivileges: true,
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: p.noFile, Soft: p.noFile}},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
		},
	}
	if spec.ReadOnlyRoot && !mountsAt(spec.Mounts, "/tmp") {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs",
			Options: append([]string{"nosuid", "nodev", "mode=1777"}, sizeOption(spec.Resources.DiskMB)...)})
	}
	s.Mounts = append(s.Mounts, mounts...)
	if r := resources(spec.Resources); r != nil {
		s.Linux.Resources = r
		s.Linux.CgroupsPath = cgroup
	}
	return s
}

func sizeOption(mb int64) []string {
	if mb <= 0 {
		return nil
	}
	return []string{"size=" + strconv.FormatInt(mb, 10) + "m"}
}

func mountsAt(ms []sandbox.Mount, dest string) bool {
	for _, m := range ms {
		if path.Clean(m.Dest) == dest {
			return true
		}
	}
	return false
}

// cpuPeriod is the CFS period of a CPU quota, in microseconds.
const cpuPeriod = 100000

// resources are the spec's memory, CPU and process limits for runsc's
// cgroup; nil when there are none.
func resources(r sandbox.Resources) *specs.LinuxResources {
	if r.MemoryMB <= 0 && r.CPUPercent <= 0 && r.PIDs <= 0 {
		return nil
	}
	out := &specs.LinuxResources{}
	if r.MemoryMB > 0 {
		limit := r.MemoryMB << 20
		out.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	if r.CPUPercent > 0 {
		quota, period := r.CPUPercent*cpuPeriod/100, uint64(cpuPeriod)
		out.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if r.PIDs > 0 {
		pids := r.PIDs
		out.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return out
}

// writeConfig writes s as dir/config.json.
func writeConfig(dir string, s *specs.Spec) error {
	b, err := marshalConfig(s)
	if err != nil {
		return err
	}
	return os.WriteFile(dir+"/config.json", b, 0o600)
}

// config, configLinux and configResources are the parts of specs.Spec,
// specs.Linux and specs.LinuxResources that this backend sets, their
// fields in the same order under the same names: encoded, they give
// the bytes json.Marshal gives for the whole types. encoding/json
// builds its encoder for a type's whole tree on first use, once per
// process: for specs.Spec (every platform's sections, every cgroup
// controller) that was about a millisecond of every run's start-up.
type config struct {
	Version  string         `json:"ociVersion"`
	Process  *specs.Process `json:"process,omitempty"`
	Root     *specs.Root    `json:"root,omitempty"`
	Hostname string         `json:"hostname,omitempty"`
	Mounts   []specs.Mount  `json:"mounts,omitempty"`
	Hooks    *specs.Hooks   `json:"hooks,omitempty"`
	// Annotations: a persistent sandbox's container names (detached.go).
	Annotations map[string]string `json:"annotations,omitempty"`
	Linux       *configLinux      `json:"linux,omitempty"`
}

type configLinux struct {
	Resources   *configResources       `json:"resources,omitempty"`
	CgroupsPath string                 `json:"cgroupsPath,omitempty"`
	Namespaces  []specs.LinuxNamespace `json:"namespaces,omitempty"`
	Seccomp     *specs.LinuxSeccomp    `json:"seccomp,omitempty"`
}

type configResources struct {
	Memory *specs.LinuxMemory `json:"memory,omitempty"`
	CPU    *specs.LinuxCPU    `json:"cpu,omitempty"`
	Pids   *specs.LinuxPids   `json:"pids,omitempty"`
}

// warmConfigEncoders has encoding/json build (and cache) its encoders
// for config and every type under it (it builds a struct's, pointer's
// or slice's encoder with those of its fields and elements), so that a
// goroutine with nothing else to do pays for that instead of the one
// that writes the bundle.
func warmConfigEncoders() { _, _ = json.Marshal(&config{}) }

// marshalConfig is json.Marshal(s), through config when s sets nothing
// that config lacks (checked field by field: a field config does not
// carry is never dropped), else through specs.Spec itself.
func marshalConfig(s *specs.Spec) ([]byte, error) {
	c, ok := asConfig(s)
	if !ok {
		return json.Marshal(s)
	}
	return json.Marshal(c)
}

// asConfig is s as a config; false when s sets a field config lacks.
func asConfig(s *specs.Spec) (*config, bool) {
	rest := *s
	rest.Version, rest.Process, rest.Root, rest.Hostname, rest.Mounts, rest.Hooks, rest.Annotations, rest.Linux = "", nil, nil, "", nil, nil, nil, nil
	if !reflect.ValueOf(rest).IsZero() {
		return nil, false
	}
	c := &config{Version: s.Version, Process: s.Process, Root: s.Root, Hostname: s.Hostname, Mounts: s.Mounts, Hooks: s.Hooks, Annotations: s.Annotations}
	if s.Linux == nil {
		return c, true
	}
	l := *s.Linux
	l.Resources, l.CgroupsPath, l.Namespaces, l.Seccomp = nil, "", nil, nil
	if !reflect.ValueOf(l).IsZero() {
		return nil, false
	}
	c.Linux = &configLinux{CgroupsPath: s.Linux.CgroupsPath, Namespaces: s.Linux.Namespaces, Seccomp: s.Linux.Seccomp}
	if r := s.Linux.Resources; r != nil {
		rr := *r
		rr.Memory, rr.CPU, rr.Pids = nil, nil, nil
		if !reflect.ValueOf(rr).IsZero() {
			return nil, false
		}
		c.Linux.Resources = &configResources{Memory: r.Memory, CPU: r.CPU, Pids: r.Pids}
	}
	return c, true
}
