package runcli

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/policy"
)

// BindSpecFlags registers the flags that describe a sandbox (those of
// 'run', and of 'sandbox create' later) into o. After parsing, the caller
// fills o.Set from fs.Changed with each flag's long name, which is the key
// policy.Overrides.Set documents ("userns" sets HostUserNS).
func BindSpecFlags(fs *pflag.FlagSet, o *policy.Overrides) {
	fs.StringVarP(&o.Image, "image", "i", "", "image to run (default: detected from the command and project; see 'agentkernel detect')")
	fs.StringVar(&o.Pull, "pull", "missing", "when to pull the image: missing, always or never")
	fs.StringVarP(&o.Profile, "profile", "p", "", "security profile: permissive, moderate (default) or restrictive; see 'agentkernel profiles'")
	fs.StringVar(&o.Mode, "mode", "", "agent compatibility mode: native (default), claude, codex or gemini")
	fs.StringArrayVarP(&o.Env, "env", "e", nil, "set KEY=VALUE in the sandbox, or pass KEY's value from the host (repeatable)")
	fs.StringArrayVar(&o.EnvFiles, "env-file", nil, "read KEY=VALUE lines from a file (repeatable)")
	fs.StringVarP(&o.Workdir, "workdir", "w", "", "working directory in the sandbox (default: /workspace when the project is mounted)")
	fs.StringArrayVarP(&o.Volumes, "volume", "v", nil, "mount HOST:SANDBOX[:ro|:cow] (repeatable)")
	fs.StringArrayVar(&o.Caches, "cache", nil, "keep these tools' caches across sandboxes: go, pip, npm, cargo (comma-separated, repeatable; 'none' turns off [cache] tools)")
	fs.BoolVarP(&o.TTY, "tty", "t", false, "allocate a pseudo-terminal")
	fs.BoolVar(&o.Interactive, "interactive", false, "keep stdin open")
	fs.StringVarP(&o.Memory, "memory", "m", "", "memory limit such as 512m or 2g (default: the profile's)")
	fs.Float64Var(&o.CPUs, "cpus", 0, "CPU limit in cores such as 0.5 or 2 (default: the profile's)")
	fs.Int64Var(&o.PIDs, "pids", 0, "limit on processes (default: the profile's)")
	fs.Var(&durationValue{&o.Timeout}, "timeout", "stop the command after this long: 30s, 5m, or a number of seconds")
	fs.BoolVar(&o.NoNetwork, "no-network", false, "no network access (loopback only); beats everything else")
	fs.Var(&networkValue{&o.Network}, "network", "network mode: none, filtered (only --allow-domain names) or full (all but --block-domain names), or on (egress as the profile and mode give it); default: the profile's and mode's")
	fs.StringArrayVar(&o.AllowDomains, "allow-domain", nil, "let the sandbox reach this host name, or *.example.com for a domain and its subdomains (repeatable)")
	fs.StringArrayVar(&o.BlockDomains, "block-domain", nil, "refuse this host name or *.example.com (repeatable; block wins over allow)")
	fs.StringArrayVar(&o.AllowCIDRs, "allow-cidr", nil, "let the sandbox reach this address or range by address, such as 10.0.0.0/8 (repeatable; needed for private, host and metadata addresses)")
	fs.StringArrayVarP(&o.Publish, "publish", "P", nil, "publish a sandbox port on the host: HOST_PORT:SANDBOX_PORT[/tcp], IP:HOST_PORT:SANDBOX_PORT (TCP only) (default IP 127.0.0.1; repeatable; without /dev/net/tun, in proxy mode, TCP to the sandbox's loopback)")
	fs.BoolVar(&o.ReadOnly, "read-only", false, "read-only root filesystem, with a tmpfs /tmp")
	fs.StringVarP(&o.User, "user", "u", "", "run as NAME, UID or UID:GID (default: the image's user)")
	fs.StringVar(&o.Hostname, "hostname", "", "the sandbox's hostname (default \""+policy.DefaultHostname+"\")")
	fs.BoolVarP(&o.Keep, "keep", "k", false, "keep the sandbox's writable layer after the run")
	fs.Var(&usernsValue{&o.HostUserNS}, "userns", "user namespace: private or host")
}

// networkValue is a pflag.Value for --network MODE.
type networkValue struct{ m *config.NetworkSetting }

func (v *networkValue) Set(s string) error {
	m, err := config.ParseNetworkSetting(s)
	if err != nil {
		return err
	}
	*v.m = m
	return nil
}

func (v *networkValue) String() string {
	if v.m == nil {
		return ""
	}
	return string(*v.m)
}

func (v *networkValue) Type() string { return "mode" }

// durationValue is a pflag.Value for --timeout: a duration ("30s", "5m")
// or a bare number of seconds.
type durationValue struct{ d *time.Duration }

func (v *durationValue) Set(s string) error {
	d, err := config.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

func (v *durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return v.d.String()
}

func (v *durationValue) Type() string { return "duration" }

// usernsValue is a pflag.Value for --userns host|private.
type usernsValue struct{ host *bool }

func (v *usernsValue) Set(s string) error {
	switch s {
	case "host":
		*v.host = true
	case "private":
		*v.host = false
	default:
		return fmt.Errorf("use host or private")
	}
	return nil
}

func (v *usernsValue) String() string {
	if v.host != nil && *v.host {
		return "host"
	}
	return "private"
}

func (v *usernsValue) Type() string { return "host|private" }
