package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/detect"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// fixture is a project directory, a home directory and a host environment.
type fixture struct {
	cwd, home string
	env       map[string]string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	return fixture{
		cwd:  t.TempDir(),
		home: t.TempDir(),
		env: map[string]string{
			"HOME": "/root/host-home", "USER": "alice", "LANG": "C.UTF-8", "TERM": "xterm",
			"PATH": "/host/bin", "SECRET": "s", "ANTHROPIC_API_KEY": "ak", "OPENAI_API_KEY": "ok",
			"GOOGLE_API_KEY": "gk", "FROM_HOST": "h",
		},
	}
}

func (f fixture) input(cfg *config.Config, o Overrides, args ...string) Input {
	return Input{
		Config: cfg, Overrides: o, Args: args, Cwd: f.cwd, HomeDir: f.home,
		HostEnv: func(k string) (string, bool) { v, ok := f.env[k]; return v, ok },
	}
}

func (f fixture) resolve(t *testing.T, cfg *config.Config, o Overrides, args ...string) (*sandbox.Spec, []string) {
	t.Helper()
	spec, warns, err := Resolve(f.input(cfg, o, args...))
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return spec, warns
}

func parse(t *testing.T, doc string) *config.Config {
	t.Helper()
	c, warns, err := config.Parse([]byte(doc), "agentkernel.toml")
	if err != nil || len(warns) > 0 {
		t.Fatalf("config: %v %v", warns, err)
	}
	return c
}

func mountAt(spec *sandbox.Spec, dest string) *sandbox.Mount {
	for i := range spec.Mounts {
		if spec.Mounts[i].Dest == dest {
			return &spec.Mounts[i]
		}
	}
	return nil
}

// TestProfileTable checks every cell of the profile table (README, "Security profiles").
func TestProfileTable(t *testing.T) {
	f := newFixture(t)
	type row struct {
		network    sandbox.NetworkMode
		cwd        *sandbox.Mount
		workdir    string
		home       bool
		env        []string
		readOnly   bool
		caps       []string
		seccomp    sandbox.SeccompProfile
		mem, pids  int64
		cpuPercent int64
	}
	want := map[string]row{
		"permissive": {
			network: sandbox.NetworkFull,
			cwd:     &sandbox.Mount{Kind: sandbox.MountBind, Source: f.cwd, Dest: "/workspace"},
			workdir: "/workspace",
			home:    true,
			env:     []string{"HOME=/home/user", "USER=alice", "LANG=C.UTF-8", "TERM=xterm"},
			caps: []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
				"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
				"CAP_KILL", "CAP_AUDIT_WRITE"},
			seccomp: sandbox.SeccompDefault,
			pids:    4096,
		},
		"moderate": {
			network:    sandbox.NetworkFull,
			cwd:        &sandbox.Mount{Kind: sandbox.MountCopyOnWrite, Source: f.cwd, Dest: "/workspace"},
			workdir:    "/workspace",
			caps:       []string{"CAP_CHOWN", "CAP_SETUID", "CAP_SETGID", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL"},
			seccomp:    sandbox.SeccompNoPtrace,
			mem:        2048,
			pids:       1024,
			cpuPercent: 100,
		},
		"restrictive": {
			network:    sandbox.NetworkNone,
			readOnly:   true,
			caps:       []string{},
			seccomp:    sandbox.SeccompAllowlist,
			mem:        512,
			pids:       256,
			cpuPercent: 50,
		},
	}
	if len(want) != len(Profiles()) {
		t.Fatalf("%d profiles, want %d", len(Profiles()), len(want))
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			spec, _ := f.resolve(t, nil, Overrides{Profile: name}, "true")
			if spec.Profile != name || spec.Mode != "native" {
				t.Errorf("profile/mode = %s/%s", spec.Profile, spec.Mode)
			}
			if spec.Network.Mode != w.network {
				t.Errorf("network = %s, want %s", spec.Network.Mode, w.network)
			}
			got := mountAt(spec, "/workspace")
			if (got == nil) != (w.cwd == nil) || got != nil && !reflect.DeepEqual(*got, *w.cwd) {
				t.Errorf("cwd mount = %+v, want %+v", got, w.cwd)
			}
			if spec.Workdir != w.workdir {
				t.Errorf("workdir = %q, want %q", spec.Workdir, w.workdir)
			}
			home := mountAt(spec, "/home/user")
			if w.home {
				if home == nil || !reflect.DeepEqual(*home, sandbox.Mount{Kind: sandbox.MountBind, Source: f.home, Dest: "/home/user", ReadOnly: true}) {
					t.Errorf("home mount = %+v", home)
				}
			} else if home != nil {
				t.Errorf("home mounted: %+v", home)
			}
			if !slices.Equal(spec.Env, w.env) {
				t.Errorf("env = %q, want %q", spec.Env, w.env)
			}
			if spec.ReadOnlyRoot != w.readOnly {
				t.Errorf("read-only root = %v", spec.ReadOnlyRoot)
			}
			tmp := mountAt(spec, "/tmp")
			if w.readOnly != (tmp != nil && tmp.Kind == sandbox.MountTmpfs) {
				t.Errorf("tmpfs /tmp = %+v", tmp)
			}
			if !reflect.DeepEqual(spec.Security.Capabilities, w.caps) {
				t.Errorf("caps = %q, want %q", spec.Security.Capabilities, w.caps)
			}
			if spec.Security.Seccomp != w.seccomp || !spec.Security.NoNewPrivs || !spec.Security.Landlock || spec.Security.HostUserNS {
				t.Errorf("security = %+v", spec.Security)
			}
			r := spec.Resources
			if r.MemoryMB != w.mem || r.PIDs != w.pids || r.CPUPercent != w.cpuPercent || r.Timeout != 0 || r.DiskMB != 0 {
				t.Errorf("resources = %+v, want %d MB / %d pids / %d%%", r, w.mem, w.pids, w.cpuPercent)
			}
			if spec.Hostname != "agentkernel" || spec.Pull != "missing" || len(spec.ID) != 12 {
				t.Errorf("hostname %q pull %q id %q", spec.Hostname, spec.Pull, spec.ID)
			}
			// Metadata endpoints are the network's to refuse in every
			// mode (netpolicy), not a list entry a spec could lose.
			if len(spec.Network.BlockDomains) != 0 {
				t.Errorf("block list of a profile without a mode: %v", spec.Network.BlockDomains)
			}
		})
	}
}

func TestDefaultProfileIsModerate(t *testing.T) {
	f := newFixture(t)
	spec, warns := f.resolve(t, nil, Overrides{}, "true")
	if spec.Profile != "moderate" || spec.Mode != "native" || len(warns) > 0 {
		t.Errorf("default = %s/%s %v", spec.Profile, spec.Mode, warns)
	}
}

func TestModes(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		mode     string
		profile  string
		allow    []string
		block    []string
		apiKey   string
		readOnly bool
	}{
		{"native", "moderate", nil, nil, "", false},
		{"claude", "moderate",
			[]string{"api.anthropic.com", "cdn.anthropic.com", "*.pypi.org", "*.npmjs.com", "*.github.com", "*.githubusercontent.com", "*.crates.io"},
			nil, "ANTHROPIC_API_KEY=ak", false},
		{"codex", "restrictive",
			[]string{"api.openai.com", "cdn.openai.com", "*.pypi.org", "*.npmjs.com"},
			[]string{"*.internal"}, "OPENAI_API_KEY=ok", true},
		{"gemini", "moderate",
			[]string{"generativelanguage.googleapis.com", "*.googleapis.com", "*.pypi.org", "*.npmjs.com", "*.github.com"},
			nil, "GOOGLE_API_KEY=gk", false},
	}
	for _, tt := range tests {
		for _, via := range []string{"flag", "config"} {
			t.Run(tt.mode+" via "+via, func(t *testing.T) {
				var cfg *config.Config
				o := Overrides{}
				if via == "flag" {
					o.Mode = tt.mode
				} else {
					cfg = parse(t, "[agent]\ncompatibility_mode = \""+tt.mode+"\"\n")
				}
				spec, warns := f.resolve(t, cfg, o, "claude")
				if len(warns) > 0 {
					t.Errorf("warnings: %v", warns)
				}
				if spec.Mode != tt.mode || spec.Profile != tt.profile {
					t.Errorf("mode/profile = %s/%s, want %s/%s", spec.Mode, spec.Profile, tt.mode, tt.profile)
				}
				if want := map[bool]sandbox.NetworkMode{true: sandbox.NetworkFiltered, false: sandbox.NetworkFull}[len(tt.allow) > 0]; spec.Network.Mode != want {
					t.Errorf("network = %s, want %s", spec.Network.Mode, want)
				}
				if !slices.Equal(spec.Network.AllowDomains, tt.allow) || !slices.Equal(spec.Network.BlockDomains, tt.block) {
					t.Errorf("domains = %v / %v", spec.Network.AllowDomains, spec.Network.BlockDomains)
				}
				if spec.ReadOnlyRoot != tt.readOnly {
					t.Errorf("read-only root = %v", spec.ReadOnlyRoot)
				}
				cwd := mountAt(spec, "/workspace")
				if tt.mode == "native" {
					if cwd == nil || cwd.Kind != sandbox.MountCopyOnWrite {
						t.Errorf("native cwd mount = %+v, want the profile's copy-on-write", cwd)
					}
					if len(spec.Env) != 0 {
						t.Errorf("native env = %v", spec.Env)
					}
					return
				}
				if cwd == nil || cwd.Kind != sandbox.MountBind || cwd.ReadOnly || spec.Workdir != "/workspace" {
					t.Errorf("agent cwd mount = %+v", cwd)
				}
				if !slices.Equal(spec.Env, []string{tt.apiKey}) {
					t.Errorf("env = %v, want only %s", spec.Env, tt.apiKey)
				}
			})
		}
	}
	// An explicit profile beats the mode's base; the mode's deltas stay.
	spec, _ := f.resolve(t, nil, Overrides{Mode: "codex", Profile: "permissive"}, "x")
	if spec.Profile != "permissive" || spec.ReadOnlyRoot || mountAt(spec, "/workspace").Kind != sandbox.MountBind {
		t.Errorf("codex + permissive: %+v", spec)
	}
	spec, _ = f.resolve(t, parse(t, "[security]\nprofile = \"permissive\"\n"), Overrides{Mode: "codex"}, "x")
	if spec.Profile != "permissive" {
		t.Errorf("config profile lost to the mode's base: %s", spec.Profile)
	}
	// --no-network beats an agent mode, with a warning.
	spec, warns := f.resolve(t, nil, Overrides{Mode: "claude", NoNetwork: true}, "x")
	if spec.Network.Mode != sandbox.NetworkNone || len(spec.Network.AllowDomains) != 0 || len(warns) != 1 || !strings.Contains(warns[0], "api.anthropic.com") {
		t.Errorf("claude --no-network: %+v %v", spec.Network, warns)
	}
	// A metadata name in the allow list is refused anyway, and said so.
	_, warns = f.resolve(t, nil, Overrides{Network: config.NetworkFiltered, AllowDomains: []string{"metadata.google.internal", "*.example.com"}}, "x")
	if len(warns) != 1 || !strings.Contains(warns[0], `"metadata.google.internal"`) || !strings.Contains(warns[0], "refused in every mode") {
		t.Errorf("metadata in the allow list: %v", warns)
	}
	// Aliases.
	spec, _ = f.resolve(t, nil, Overrides{Mode: "Claude-Code"}, "x")
	if spec.Mode != "claude" {
		t.Errorf("alias: %s", spec.Mode)
	}
}

func TestOverrides(t *testing.T) {
	f := newFixture(t)
	vol := t.TempDir()
	envFile := filepath.Join(f.cwd, "vars.env")
	os.WriteFile(envFile, []byte("# comment\nA=from-file\nB=file\nFROM_HOST\n"), 0o644)

	tests := []struct {
		name  string
		o     Overrides
		check func(t *testing.T, s *sandbox.Spec)
	}{
		{"--memory", Overrides{Memory: "1g"}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Resources.MemoryMB, int64(1024)) }},
		{"--cpus", Overrides{CPUs: 1.5}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Resources.CPUPercent, int64(150)) }},
		{"--cpus tiny", Overrides{CPUs: 0.001}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Resources.CPUPercent, int64(1)) }},
		{"--pids", Overrides{PIDs: 42}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Resources.PIDs, int64(42)) }},
		{"--timeout", Overrides{Timeout: time.Minute}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Resources.Timeout, time.Minute) }},
		{"--no-network", Overrides{NoNetwork: true}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, s.Network.Mode, sandbox.NetworkNone)
			eq(t, len(s.Network.BlockDomains), 0)
		}},
		{"--network on restrictive", Overrides{Profile: "restrictive", Network: config.NetworkOn}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Network.Mode, sandbox.NetworkFull) }},
		{"--network filtered", Overrides{Network: config.NetworkFiltered, AllowDomains: []string{"*.example.com"}}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, s.Network.Mode, sandbox.NetworkFiltered)
			eq(t, s.Network.AllowDomains, []string{"*.example.com"})
		}},
		{"--network full beats a mode's filter", Overrides{Mode: "claude", Network: config.NetworkAll}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Network.Mode, sandbox.NetworkFull) }},
		{"--network on keeps a mode's filter", Overrides{Mode: "claude", Network: config.NetworkOn}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Network.Mode, sandbox.NetworkFiltered) }},
		{"--network none", Overrides{Network: config.NetworkOff}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Network.Mode, sandbox.NetworkNone) }},
		{"--allow-cidr and --publish", Overrides{AllowCIDRs: []string{"10.1.2.3", "fd00::/8"}, Publish: []string{"8080:80"}}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, s.Network.AllowCIDRs, []string{"10.1.2.3/32", "fd00::/8"})
			eq(t, s.Network.Ports, []sandbox.PortMapping{{HostPort: 8080, SandboxPort: 80}})
		}},
		{"--read-only", Overrides{ReadOnly: true}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, s.ReadOnlyRoot, true)
			eq(t, mountAt(s, "/tmp") != nil, true)
		}},
		{"--read-only=false on restrictive", Overrides{Profile: "restrictive", Set: map[string]bool{"profile": true, "read-only": true}}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, s.ReadOnlyRoot, false)
			eq(t, mountAt(s, "/tmp") == nil, true)
		}},
		{"--user", Overrides{User: "1000:1000"}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.User, "1000:1000") }},
		{"--workdir", Overrides{Workdir: "/src/"}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Workdir, "/src") }},
		{"--hostname", Overrides{Hostname: "box-1"}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Hostname, "box-1") }},
		{"-t --interactive --keep", Overrides{TTY: true, Interactive: true, Keep: true}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, s.TTY && s.Interactive && s.Keep, true)
		}},
		{"--userns host", Overrides{HostUserNS: true}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Security.HostUserNS, true) }},
		{"--image", Overrides{Image: "busybox:1"}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, s.Image, "busybox:1")
			eq(t, s.ImageRule, "flag")
		}},
		{"--pull", Overrides{Pull: "never"}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Pull, "never") }},
		{"--name", Overrides{Name: "box"}, func(t *testing.T, s *sandbox.Spec) { eq(t, s.Name, "box") }},
		{"-e", Overrides{Env: []string{"A=1", "FROM_HOST", "NOT_ON_HOST", "A=2", "EMPTY="}}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, strings.Join(s.Env, " "), "A=2 FROM_HOST=h EMPTY=")
		}},
		{"--env-file then -e", Overrides{EnvFiles: []string{"vars.env"}, Env: []string{"B=flag"}}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, strings.Join(s.Env, " "), "A=from-file B=flag FROM_HOST=h")
		}},
		{"-v", Overrides{Volumes: []string{vol + ":/data:ro", vol + ":/workspace"}}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, *mountAt(s, "/data"), sandbox.Mount{Kind: sandbox.MountBind, Source: vol, Dest: "/data", ReadOnly: true})
			// A -v on /workspace replaces the project mount.
			eq(t, *mountAt(s, "/workspace"), sandbox.Mount{Kind: sandbox.MountBind, Source: vol, Dest: "/workspace"})
			eq(t, len(s.Mounts), 2)
		}},
		{"Set ignores flags not given", Overrides{Memory: "1g", Profile: "restrictive", Set: map[string]bool{}}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, s.Profile, "moderate")
			eq(t, s.Resources.MemoryMB, int64(2048))
		}},
		{"--timeout 0 given clears the config's", Overrides{Set: map[string]bool{"timeout": true}}, func(t *testing.T, s *sandbox.Spec) {
			eq(t, s.Resources.Timeout, time.Duration(0))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg *config.Config
			if strings.HasPrefix(tt.name, "--timeout") {
				cfg = parse(t, "[resources]\ntimeout = 30\n") // the flag must beat it
			}
			spec, _ := f.resolve(t, cfg, tt.o, "python3", "x.py")
			tt.check(t, spec)
		})
	}
}

func TestConfigLayer(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name  string
		doc   string
		o     Overrides
		check func(t *testing.T, s *sandbox.Spec, warns []string)
	}{
		{"network=false", "[security]\nnetwork = false\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Network.Mode, sandbox.NetworkNone)
		}},
		{"network=true on restrictive", "[security]\nprofile = \"restrictive\"\nnetwork = true\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Network.Mode, sandbox.NetworkFull)
		}},
		{"--no-network beats network=true", "[security]\nnetwork = true\n", Overrides{NoNetwork: true}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Network.Mode, sandbox.NetworkNone)
		}},
		{"network = \"filtered\"", "[security]\nnetwork = \"filtered\"\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Network.Mode, sandbox.NetworkFiltered)
		}},
		{"allowlist_only filters", "[security.domains]\nallow = [\"x.example\"]\nallowlist_only = true\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Network.Mode, sandbox.NetworkFiltered)
		}},
		{"allow_cidrs", "[network]\nallow_cidrs = [\"10.0.0.0/8\"]\nallow_udp = [\"10.0.0.1:53\"]\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Network.AllowCIDRs, []string{"10.0.0.0/8"})
			eq(t, s.Network.AllowUDP, []string{"10.0.0.1:53"})
		}},
		{"mount_cwd rw", "[security]\nmount_cwd = \"rw\"\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, *mountAt(s, "/workspace"), sandbox.Mount{Kind: sandbox.MountBind, Source: f.cwd, Dest: "/workspace"})
		}},
		{"mount_cwd ro", "[security]\nmount_cwd = \"ro\"\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, *mountAt(s, "/workspace"), sandbox.Mount{Kind: sandbox.MountBind, Source: f.cwd, Dest: "/workspace", ReadOnly: true})
		}},
		{"mount_cwd false beats an agent mode", "[security]\nmount_cwd = false\n", Overrides{Mode: "claude"}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, mountAt(s, "/workspace") == nil, true)
			eq(t, s.Workdir, "")
		}},
		{"mount_cwd cow on restrictive", "[security]\nprofile = \"restrictive\"\nmount_cwd = \"cow\"\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, mountAt(s, "/workspace").Kind, sandbox.MountCopyOnWrite)
		}},
		{"mount_home", "[security]\nmount_home = true\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, mountAt(s, "/home/user").ReadOnly, true)
		}},
		{"mount_home false on permissive", "[security]\nprofile = \"permissive\"\nmount_home = false\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, mountAt(s, "/home/user") == nil, true)
			eq(t, slices.ContainsFunc(s.Env, func(e string) bool { return strings.HasPrefix(e, "HOME=") }), false)
		}},
		{"pass_env true", "[security]\npass_env = true\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, strings.Join(s.Env, " "), "USER=alice LANG=C.UTF-8 TERM=xterm")
		}},
		{"pass_env list", "[security]\npass_env = [\"SECRET\", \"MISSING\"]\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, strings.Join(s.Env, " "), "SECRET=s")
		}},
		{"pass_env false on permissive", "[security]\nprofile = \"permissive\"\npass_env = false\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, len(s.Env), 0)
		}},
		{"read_only", "[security]\nread_only = true\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.ReadOnlyRoot, true)
			eq(t, mountAt(s, "/tmp").Kind, sandbox.MountTmpfs)
		}},
		{"seccomp", "[security]\nseccomp = \"allowlist\"\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Security.Seccomp, sandbox.SeccompAllowlist)
		}},
		{"seccomp unconfined warns", "[security]\nseccomp = \"unconfined\"\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, w []string) {
			eq(t, s.Security.Seccomp, sandbox.SeccompUnconfined)
			eq(t, len(w), 1)
		}},
		{"resources", "[resources]\nvcpus = 2\nmemory_mb = 300\npids = 30\ndisk_mb = 900\ntimeout = \"1m\"\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Resources, sandbox.Resources{MemoryMB: 300, PIDs: 30, CPUPercent: 200, DiskMB: 900, Timeout: time.Minute})
		}},
		{"flags beat resources", "[resources]\nmemory_mb = 300\n", Overrides{Memory: "600"}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Resources.MemoryMB, int64(600))
		}},
		{"domains merged with the mode's", "[security.domains]\nallow = [\"x.example\"]\nblock = [\"y.example\"]\nallowlist_only = true\n", Overrides{Mode: "codex"}, func(t *testing.T, s *sandbox.Spec, w []string) {
			eq(t, s.Network.AllowDomains[len(s.Network.AllowDomains)-1], "x.example")
			eq(t, s.Network.BlockDomains[len(s.Network.BlockDomains)-1], "y.example")
			eq(t, s.Network.AllowlistOnly, true)
			eq(t, len(w), 0)
		}},
		{"allow matched by block warns", "[security.domains]\nallow = [\"api.internal\", \"*.ok.example\"]\nblock = [\"*.ok.example\"]\n", Overrides{Mode: "codex"}, func(t *testing.T, s *sandbox.Spec, w []string) {
			eq(t, len(w), 2)
		}},
		{"domain rules with no network warn", "[security]\nnetwork = false\n[security.domains]\nallow = [\"x.example\"]\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, w []string) {
			eq(t, len(w), 1)
			eq(t, len(s.Network.AllowDomains), 0)
		}},
		{"ports", "[network]\nports = [\"8080:80\"]\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Network.Ports, []sandbox.PortMapping{{HostPort: 8080, SandboxPort: 80}})
		}},
		{"image from config", "[sandbox]\nruntime = \"go\"\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Image, "golang:1.23-alpine")
			eq(t, s.ImageRule, "config")
		}},
		{"allowed command", "[security.commands]\nallow = [\"python3\"]\nallowlist_only = true\n", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			eq(t, s.Args[0], "python3")
			if s.Commands == nil || !s.Commands.AllowlistOnly || len(s.Commands.Allow) != 1 || s.Commands.Check(s.Args) != nil {
				t.Errorf("rules %+v", s.Commands)
			}
			eq(t, s.Commands.AllowFrom, "agentkernel.toml:3")
			if err := s.Commands.Check([]string{"node"}); !errors.Is(err, sandbox.ErrCommandRefused) || !strings.Contains(err.Error(), "agentkernel.toml:3") {
				t.Errorf("node: %v", err)
			}
		}},
		{"no command rules", "", Overrides{}, func(t *testing.T, s *sandbox.Spec, _ []string) {
			// Always set, so that a persistent sandbox's spec says its
			// rules were recorded even when there are none.
			if s.Commands == nil || s.Commands.Check([]string{"curl"}) != nil {
				t.Errorf("rules %+v", s.Commands)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, warns := f.resolve(t, parse(t, tt.doc), tt.o, "python3", "x.py")
			tt.check(t, spec, warns)
		})
	}
}

func TestImageFromDetection(t *testing.T) {
	f := newFixture(t)
	spec, _ := f.resolve(t, nil, Overrides{}, "python3", "x.py")
	if spec.Image != "python:3.12-alpine" || spec.ImageRule != "command" {
		t.Errorf("detected %s by %s", spec.Image, spec.ImageRule)
	}
	in := f.input(nil, Overrides{}, "python3")
	in.Detected = detect.Result{Image: "given:1", Rule: "project"}
	spec, _, err := Resolve(in)
	if err != nil || spec.Image != "given:1" || spec.ImageRule != "project" {
		t.Errorf("caller's detection not used: %v %+v", err, spec)
	}
	if !slices.Equal(spec.Args, []string{"python3"}) {
		t.Errorf("args = %v", spec.Args)
	}
}

func TestBadInputs(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name string
		doc  string
		o    Overrides
		args []string
		msg  string
	}{
		{"unknown profile", "", Overrides{Profile: "paranoid"}, nil, "unknown profile \"paranoid\": use permissive, moderate, restrictive"},
		{"unknown mode", "", Overrides{Mode: "copilot"}, nil, "unknown mode \"copilot\": use native, claude, codex, gemini"},
		{"memory zero", "", Overrides{Memory: "0"}, nil, "--memory"},
		{"memory garbage", "", Overrides{Memory: "lots"}, nil, "invalid memory size"},
		{"memory given empty", "", Overrides{Set: map[string]bool{"memory": true}}, nil, "empty"},
		{"cpus negative", "", Overrides{CPUs: -1}, nil, "--cpus"},
		{"cpus given zero", "", Overrides{Set: map[string]bool{"cpus": true}}, nil, "--cpus"},
		{"pids given zero", "", Overrides{Set: map[string]bool{"pids": true}}, nil, "--pids"},
		{"timeout negative", "", Overrides{Timeout: -time.Second}, nil, "--timeout"},
		{"network and no-network", "", Overrides{Network: config.NetworkAll, NoNetwork: true}, nil, "cannot be used together"},
		{"bad --allow-cidr", "", Overrides{AllowCIDRs: []string{"10.0.0.0/40"}}, nil, "invalid address range"},
		{"bad --allow-domain", "", Overrides{AllowDomains: []string{"a b"}}, nil, "invalid domain pattern"},
		{"bad --publish", "", Overrides{Publish: []string{"0:80"}}, nil, "invalid port mapping"},
		{"--publish twice", "", Overrides{Publish: []string{"8080:80", "8080:81"}}, nil, "published twice"},
		{"--publish without network", "", Overrides{NoNetwork: true, Publish: []string{"8080:80"}}, nil, "need network access"},
		{"pull", "", Overrides{Pull: "sometimes"}, nil, "--pull"},
		{"relative workdir", "", Overrides{Workdir: "src"}, nil, "--workdir"},
		{"user with spaces", "", Overrides{User: "a b"}, nil, "--user"},
		{"user with two colons", "", Overrides{User: "1:2:3"}, nil, "--user"},
		{"hostname", "", Overrides{Hostname: "-bad"}, nil, "--hostname"},
		{"image", "", Overrides{Image: "x; rm -rf /"}, nil, "invalid character"},
		{"name", "", Overrides{Name: "a--b"}, nil, "consecutive"},
		{"volume", "", Overrides{Volumes: []string{"/nonexistent-xyz:/data"}}, nil, "does not exist"},
		{"env", "", Overrides{Env: []string{"=x"}}, nil, "empty name"},
		{"env file missing", "", Overrides{EnvFiles: []string{"nope.env"}}, nil, "--env-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg *config.Config
			if tt.doc != "" {
				cfg = parse(t, tt.doc)
			}
			args := tt.args
			if args == nil {
				args = []string{"true"}
			}
			spec, _, err := Resolve(f.input(cfg, tt.o, args...))
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v, want one containing %q", err, tt.msg)
			}
			if err != nil && spec != nil {
				t.Error("spec returned with an error")
			}
		})
	}
}

func TestCwdEdgeCases(t *testing.T) {
	f := newFixture(t)
	in := f.input(nil, Overrides{Profile: "permissive"}, "x")
	in.Cwd = "/"
	spec, warns, err := Resolve(in)
	if err != nil || mountAt(spec, "/workspace") != nil || len(warns) != 1 || !strings.Contains(warns[0], "refusing") {
		t.Errorf("cwd /: %v %v", warns, err)
	}
	in.Cwd = ""
	in.HomeDir = ""
	spec, warns, err = Resolve(in)
	if err != nil || len(spec.Mounts) != 0 || len(warns) != 2 {
		t.Errorf("no cwd, no home: %+v %v %v", spec.Mounts, warns, err)
	}
}

// TestDataDirNotHandedOver: a project directory, $HOME or volume that
// holds agentkernel's data directory (its state, snapshots and keys) is
// not mounted into a sandbox: the project and $HOME are left out with a
// warning, a volume is refused. A sibling directory, or one below the
// data directory's parent, is mounted as before.
func TestDataDirNotHandedOver(t *testing.T) {
	f := newFixture(t)
	data := filepath.Join(f.cwd, ".local", "share", "agentkernel")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	in := f.input(nil, Overrides{Profile: "permissive"}, "x")
	in.DataDir = data
	in.HomeDir = f.cwd
	spec, warns, err := Resolve(in)
	if err != nil || mountAt(spec, WorkspaceDir) != nil || mountAt(spec, HomeDir) != nil || len(warns) != 2 ||
		!strings.Contains(warns[0], "holds agentkernel's data directory") || !strings.Contains(warns[1], "$HOME is not mounted") {
		t.Errorf("project and home holding the data directory: %+v %q %v", spec.Mounts, warns, err)
	}
	// The data directory itself, and through a symbolic link.
	in.Cwd = data
	if spec, _, _ := Resolve(in); mountAt(spec, WorkspaceDir) != nil {
		t.Error("the data directory itself was mounted as the project")
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(f.cwd, link); err != nil {
		t.Fatal(err)
	}
	in.Cwd = link
	if spec, _, _ := Resolve(in); mountAt(spec, WorkspaceDir) != nil {
		t.Error("a symbolic link to a directory holding the data directory was mounted")
	}
	// A relative data directory (--data-dir .local/share/agentkernel)
	// is the process's working directory's.
	t.Chdir(f.cwd)
	in.Cwd = f.cwd
	in.DataDir = filepath.Join(".local", "share", "agentkernel")
	if spec, _, _ := Resolve(in); mountAt(spec, WorkspaceDir) != nil {
		t.Error("a project holding a relative data directory was mounted")
	}
	// Volumes: refused, whatever their options.
	for _, v := range []string{f.cwd + ":/data", filepath.Dir(data) + ":/data:ro", data + ":/d", link + ":/l"} {
		in := f.input(nil, Overrides{Volumes: []string{v}}, "x")
		in.DataDir = data
		if _, _, err := Resolve(in); err == nil || !strings.Contains(err.Error(), "holds agentkernel's data directory") {
			t.Errorf("volume %s: %v", v, err)
		}
	}
	// Beside it, or below it in another branch: mounted.
	other := filepath.Join(f.cwd, "project")
	for _, d := range []string{other, filepath.Join(f.cwd, ".local", "bin")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	in = f.input(nil, Overrides{Profile: "permissive", Volumes: []string{filepath.Join(f.cwd, ".local", "bin") + ":/b"}}, "x")
	in.DataDir = data
	in.Cwd = other
	if spec, warns, err := Resolve(in); err != nil || mountAt(spec, WorkspaceDir) == nil || mountAt(spec, "/b") == nil || len(warns) != 0 {
		t.Errorf("a project beside the data directory: %v %q %v", spec, warns, err)
	}
	// A data directory named like a prefix of the project is not inside it.
	in = f.input(nil, Overrides{Profile: "permissive"}, "x")
	in.Cwd = filepath.Join(f.cwd, "ab")
	in.DataDir = filepath.Join(f.cwd, "abc")
	if err := os.Mkdir(in.Cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	if spec, _, err := Resolve(in); err != nil || mountAt(spec, WorkspaceDir) == nil {
		t.Errorf("project ab, data directory abc: %v %v", spec, err)
	}
}

// TestSayWhereItRuns: a command-line run whose profile (or config) leaves
// the project directory out is told where the command runs instead, once;
// not when the project is mounted, when --workdir or a volume of the
// directory places the command, or for callers that did not ask.
func TestSayWhereItRuns(t *testing.T) {
	f := newFixture(t)
	real, err := filepath.EvalSymlinks(f.cwd)
	if err != nil {
		t.Fatal(err)
	}
	note := func(cfg *config.Config, o Overrides, say bool) []string {
		t.Helper()
		in := f.input(cfg, o, "python3", "-m", "unittest")
		in.SayWhereItRuns = say
		spec, warns, err := Resolve(in)
		if err != nil {
			t.Fatal(err)
		}
		var notes []string
		for _, w := range warns {
			if strings.Contains(w, "runs in") {
				notes = append(notes, w)
			}
		}
		if len(notes) > 0 && spec.Workdir != "" {
			t.Errorf("a note although the workdir is %s", spec.Workdir)
		}
		return notes
	}
	got := note(nil, Overrides{Profile: "restrictive"}, true)
	if len(got) != 1 || !strings.Contains(got[0], "restrictive profile does not mount the project directory") ||
		!strings.Contains(got[0], "not in "+real) || !strings.Contains(got[0], "-v .:/workspace:ro -w /workspace") || strings.Contains(got[0], "\n") {
		t.Errorf("restrictive: %q", got)
	}
	got = note(parse(t, "[security]\nmount_cwd = \"none\"\n"), Overrides{}, true)
	if len(got) != 1 || !strings.Contains(got[0], "[security] mount_cwd") {
		t.Errorf("mount_cwd = none: %q", got)
	}
	for name, o := range map[string]Overrides{
		"moderate":             {Profile: "moderate"},
		"permissive":           {Profile: "permissive"},
		"agent mode":           {Profile: "restrictive", Mode: "codex"},
		"--workdir":            {Profile: "restrictive", Workdir: "/tmp"},
		"volume at /workspace": {Profile: "restrictive", Volumes: []string{t.TempDir() + ":/workspace"}},
		"volume of cwd":        {Profile: "restrictive", Volumes: []string{".:/src:ro"}},
	} {
		if got := note(nil, o, true); len(got) != 0 {
			t.Errorf("%s: %q", name, got)
		}
	}
	if got := note(nil, Overrides{Profile: "restrictive"}, false); len(got) != 0 {
		t.Errorf("not asked: %q", got)
	}
}

func TestMountOrder(t *testing.T) {
	f := newFixture(t)
	sub := t.TempDir()
	spec, _ := f.resolve(t, nil, Overrides{Profile: "restrictive", Volumes: []string{sub + ":/workspace/a/b", f.cwd + ":/workspace"}}, "x")
	var dests []string
	for _, m := range spec.Mounts {
		dests = append(dests, m.Dest)
	}
	if got := strings.Join(dests, " "); got != "/tmp /workspace /workspace/a/b" {
		t.Errorf("mount order %s: parents must come first", got)
	}
}

func TestTablesMatchConfigNames(t *testing.T) {
	var p, m []string
	for _, x := range Profiles() {
		p = append(p, x.Name)
	}
	for _, x := range Modes() {
		m = append(m, x.Name)
	}
	if !slices.Equal(p, config.ProfileNames()) || !slices.Equal(m, config.ModeNames()) {
		t.Errorf("profiles %v / modes %v disagree with config", p, m)
	}
	a := Profiles()
	a[1].Capabilities[0] = "CAP_SYS_ADMIN"
	if Profiles()[1].Capabilities[0] == "CAP_SYS_ADMIN" {
		t.Error("Profiles returns shared state")
	}
	// The seccomp names config accepts are the sandbox package's.
	for _, s := range []sandbox.SeccompProfile{sandbox.SeccompDefault, sandbox.SeccompNoPtrace, sandbox.SeccompAllowlist, sandbox.SeccompUnconfined} {
		if n, err := config.ParseSeccomp(string(s)); err != nil || n != string(s) {
			t.Errorf("config.ParseSeccomp(%s) = %s, %v", s, n, err)
		}
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		id := NewID()
		if len(id) != 12 || strings.Trim(id, "0123456789abcdef") != "" || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}

func eq[T any](t *testing.T, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestCommandRulesInSpec: [security.commands] is not checked by Resolve
// but carried in the spec, with the file and line of each rule, for the
// Manager to enforce wherever a command starts.
func TestCommandRulesInSpec(t *testing.T) {
	f := newFixture(t)
	cfg := parse(t, "[sandbox]\nname = \"x\"\n\n[security.commands]\nblock = [\"curl\", \"/usr/bin/wget\"]\n")
	spec, _, err := Resolve(f.input(cfg, Overrides{}, "/usr/bin/curl", "-s", "x"))
	if err != nil {
		t.Fatalf("Resolve refused a blocked command itself: %v", err)
	}
	if spec.Commands == nil || spec.Commands.BlockFrom != "agentkernel.toml:5" {
		t.Fatalf("rules %+v", spec.Commands)
	}
	err = spec.Commands.Check(spec.Args)
	if !errors.Is(err, sandbox.ErrCommandRefused) || !errors.Is(err, sandbox.ErrCannotInvoke) {
		t.Fatalf("check: %v", err)
	}
	for _, want := range []string{`"/usr/bin/curl"`, "[security.commands] block", "agentkernel.toml:5"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	// The spec's JSON (state store, daemon socket) keeps the rules.
	b, _ := json.Marshal(spec)
	var back sandbox.Spec
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Commands, spec.Commands) {
		t.Errorf("round trip: %v %+v", err, back.Commands)
	}
}
