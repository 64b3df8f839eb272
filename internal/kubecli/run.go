package kubecli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/agentkernel/agentkernel/internal/backend/kubernetes"
	"github.com/agentkernel/agentkernel/internal/clustercli"
	"github.com/agentkernel/agentkernel/internal/detect"
)

// removeTimeout bounds the removal of a run's sandbox after its command,
// which happens even when the run was interrupted.
const removeTimeout = 45 * time.Second

func (a *app) runCmd() *cobra.Command {
	var (
		image, profile, network, pool string
		memory                        int64
		cpus                          float64
		env                           []string
		interactive                   bool
		startTimeout                  time.Duration
	)
	c := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run one command in a new pod, then remove it",
		Long: `Run one command in a sandbox made for it on the cluster: a NetworkPolicy and a
pod (or a waiting pod of --pool), the command run in it through the cluster's
exec API once the pod runs, then both removed, also when the run is
interrupted. The exit status is the command's.

Without --image, the image is picked from the command and the project's
files as 'agentkernel run' picks it (python → python:3.12-alpine, go.mod →
golang:1.23-alpine, ...); the cluster pulls it.

A pod that no node starts within --start-timeout ends the run with status
125 and what the pod's status says (unschedulable, image pull errors).`,
		Example: `  agentkernel run -B kubernetes -- python3 -c 'print(1)'
  agentkernel run -B kubernetes --image alpine:3.20 --network none -- sh -c 'id; cat /etc/os-release'
  echo data | agentkernel run -B kubernetes -i --image alpine:3.20 -- wc -c`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cpus < 0 {
				return fmt.Errorf("--cpus must not be negative")
			}
			if startTimeout <= 0 {
				return fmt.Errorf("--start-timeout must be positive")
			}
			p, err := kubernetes.LookupProfile(profile)
			if err != nil {
				return err
			}
			if image == "" {
				image = detect.Image(detect.Input{Args: args}).Image
			}
			name, err := clustercli.RunName()
			if err != nil {
				return err
			}
			r := &kubernetes.Request{Name: name, Image: image, Profile: p, MemoryMB: memory, CPUPercent: int64(cpus*100 + 0.5), Env: env,
				// A run whose removal never happened (the machine died)
				// is reaped after a day.
				TTL: 24 * time.Hour}
			if r.Network, r.AllowCIDRs, r.AllowDomains, err = kubernetes.ParseNetwork(network); err != nil {
				return err
			}
			if err := r.Check(); err != nil {
				return err
			}
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var s *kubernetes.Sandbox
			if pool != "" {
				s, _, err = b.CreateFromPool(ctx, &kubernetes.Pool{Name: pool, Image: image, Profile: p}, r)
			} else {
				s, err = b.Create(ctx, r)
			}
			if err != nil {
				return err
			}
			defer func() {
				rctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
				defer cancel()
				if err := b.Remove(rctx, name); err != nil && !errors.Is(err, kubernetes.ErrNotFound) {
					fmt.Fprintf(a.stderr, "agentkernel: removing the run's sandbox %s: %v (agentkernel sandbox rm -B kubernetes %s)\n", name, err, name)
				}
			}()
			// A pod adopted from a pool runs already: the exec goes
			// straight to it.
			if s.Phase != corev1.PodRunning {
				if s, err = b.WaitRunning(ctx, name, startTimeout); err != nil {
					return err
				}
			}
			io := kubernetes.ExecIO{Stdout: a.stdout, Stderr: a.stderr}
			if interactive {
				io.Stdin = os.Stdin
			}
			code, err := b.ExecIn(ctx, s, args, io)
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&image, "image", "", "image reference (default: picked from the command and the project)")
	f.StringVarP(&profile, "profile", "p", "moderate", "security profile: restrictive, moderate or permissive")
	f.StringVar(&network, "network", "", "none, full, or what the sandbox may reach: address ranges (become a NetworkPolicy) and domain names (\"github.com,*.pypi.org\": through the pod's egress proxy, --egress-image) (default: the profile's)")
	f.Int64Var(&memory, "memory", 0, "memory limit in MiB (default: the profile's)")
	f.Float64Var(&cpus, "cpus", 0, "CPU limit in cores (default: the profile's)")
	f.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE in the sandbox's environment (repeatable)")
	f.StringVar(&pool, "pool", "", "adopt a waiting pod of this warm pool when it fits")
	f.BoolVarP(&interactive, "interactive", "i", false, "pass standard input to the command")
	f.DurationVar(&startTimeout, "start-timeout", 2*time.Minute, "how long the pod may take to start")
	return c
}

func (a *app) cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a sandbox (NAME:PATH on one side)",
		Long: `Copy one regular file between this machine and a sandbox's pod, through the
cluster's exec API: NAME:/path/in/sandbox on one side, a local path on the
other. A local directory as DST receives the file under its own name; an
existing local file is replaced. Files up to 64 MiB.`,
		Example: `  agentkernel cp -B kubernetes ./main.py dev:/tmp/main.py
  agentkernel cp -B kubernetes dev:/tmp/out.txt ./out.txt`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := clustercli.CopySides(args[0], args[1]); err != nil {
				return err
			}
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			return clustercli.Copy(cmd.Context(), b, args[0], args[1])
		},
	}
}
