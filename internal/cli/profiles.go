package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

const profilesLong = `Print what each security profile and agent mode puts in a sandbox.

A run starts from one profile (--profile, else [security].profile, else the
mode's base profile), applies the agent mode (--mode, else
[agent].compatibility_mode), then the [security] and [resources] values of
agentkernel.toml, then the flags. --no-network always wins. Every profile
sets no_new_privs and adds a Landlock ruleset where the kernel has Landlock.

A profile that mounts the project directory runs the command in it, at
/workspace; restrictive does not mount it, so its command runs in the image's
working directory (/ for most images) and run says so: -v .:/workspace:ro
-w /workspace gives it the project read-only.`

const profilesExample = `  agentkernel profiles
  agentkernel run -p restrictive -- python3 untrusted.py
  agentkernel run --mode claude --memory 4g -- claude`

func newProfilesCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "profiles [flags]",
		Short:   "Print the security profiles and agent modes",
		Long:    profilesLong,
		Example: profilesExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Profiles      []policy.Profile `json:"profiles"`
					Modes         []policy.Mode    `json:"modes"`
					MetadataHosts []string         `json:"always_blocked"`
				}{policy.Profiles(), policy.Modes(), policy.MetadataHosts()})
			}
			printProfiles(a)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the tables as JSON")
	return cmd
}

func printProfiles(a *App) {
	profiles := policy.Profiles()
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 3, ' ', 0)
	head := []string{""}
	for _, p := range profiles {
		name := p.Name
		if name == config.ProfileModerate {
			name += " (default)"
		}
		head = append(head, name)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	row := func(label string, cell func(p policy.Profile) string) {
		cells := []string{label}
		for _, p := range profiles {
			cells = append(cells, cell(p))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	row("network", func(p policy.Profile) string {
		if p.Network == sandbox.NetworkNone {
			return "none (loopback only)"
		}
		return "full (all but blocked names)"
	})
	row("project dir at "+policy.WorkspaceDir, func(p policy.Profile) string {
		switch p.Cwd {
		case config.CwdReadWrite:
			return "read-write bind"
		case config.CwdCopyOnWrite:
			return "copy-on-write"
		case config.CwdReadOnly:
			return "read-only bind"
		}
		return "not mounted"
	})
	row("$HOME", func(p policy.Profile) string {
		if p.MountHome {
			return "read-only at " + policy.HomeDir
		}
		return "hidden"
	})
	row("host env passed", func(p policy.Profile) string {
		if len(p.PassEnv) == 0 {
			return "none"
		}
		return strings.Join(p.PassEnv, " ")
	})
	row("root filesystem", func(p policy.Profile) string {
		if p.ReadOnlyRoot {
			return "read-only, tmpfs /tmp"
		}
		return "writable layer"
	})
	row("capabilities", func(p policy.Profile) string {
		switch {
		case len(p.Capabilities) == 0:
			return "none"
		case strings.Join(p.Capabilities, ",") == strings.Join(policy.DefaultCapabilities(), ","):
			return fmt.Sprintf("docker default (%d)", len(p.Capabilities))
		}
		short := make([]string, len(p.Capabilities))
		for i, c := range p.Capabilities {
			short[i] = strings.TrimPrefix(c, "CAP_")
		}
		return strings.Join(short, " ")
	})
	row("seccomp", func(p policy.Profile) string {
		switch p.Seccomp {
		case sandbox.SeccompDefault:
			return "docker default"
		case sandbox.SeccompNoPtrace:
			return "docker default, no ptrace"
		case sandbox.SeccompAllowlist:
			return "allow-list"
		}
		return string(p.Seccomp)
	})
	row("no_new_privs", func(policy.Profile) string { return "on" })
	row("memory", func(p policy.Profile) string { return limit(p.MemoryMB, "%d MB") })
	row("pids", func(p policy.Profile) string { return limit(p.PIDs, "%d") })
	row("cpu", func(p policy.Profile) string { return limit(p.CPUPercent, "%d%% of one core") })
	tw.Flush()
	fmt.Fprintln(a.Stdout, "\nNetwork modes: none (loopback only), filtered (only allowed names), full (all but blocked")
	fmt.Fprintln(a.Stdout, "names). Cloud metadata, link-local and the host's own addresses are refused in every mode")
	fmt.Fprintln(a.Stdout, "unless --allow-cidr names them.")

	fmt.Fprintln(a.Stdout)
	tw = tabwriter.NewWriter(a.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "MODE\tBASE PROFILE\tPROJECT DIR\tNETWORK\tAPI KEY PASSED\tALLOWED DOMAINS")
	for _, m := range policy.Modes() {
		project, network, key, domains := "(profile's)", "(profile's)", "-", "-"
		if m.Agent {
			project, network = "read-write", "filtered"
		}
		if m.APIKeyEnv != "" {
			key = m.APIKeyEnv
		}
		if len(m.AllowDomains) > 0 {
			domains = strings.Join(m.AllowDomains, " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.BaseProfile, project, network, key, domains)
	}
	tw.Flush()
	fmt.Fprintf(a.Stdout, "\nEvery mode blocks the cloud metadata endpoints (%s; an address only until --allow-cidr names it)", strings.Join(policy.MetadataHosts(), ", "))
	for _, m := range policy.Modes() {
		if len(m.BlockDomains) > 0 {
			fmt.Fprintf(a.Stdout, "; %s also blocks %s", m.Name, strings.Join(m.BlockDomains, " "))
		}
	}
	fmt.Fprintln(a.Stdout, ".")
	fmt.Fprintln(a.Stdout, "Override with --profile, --mode, --network MODE, --allow-domain, --block-domain, --allow-cidr,")
	fmt.Fprintln(a.Stdout, "--read-only, --memory, --cpus, --pids, --timeout, -e KEY=VAL, -w DIR and -v HOST:SANDBOX[:ro];")
	fmt.Fprintln(a.Stdout, "or in agentkernel.toml [security], [security.domains], [network] and [resources].")
}

func limit(v int64, format string) string {
	if v == 0 {
		return "unlimited"
	}
	return fmt.Sprintf(format, v)
}
