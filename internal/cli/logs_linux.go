package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/audit"
)

// newLogsCmd is docker's 'logs NAME' as far as it goes here: a
// persistent sandbox has no main process and no console, so what it can
// show is what is recorded about the sandbox.
func newLogsCmd(a *App) *cobra.Command {
	var asJSON, super bool
	var tail int
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Show what ran in a sandbox (its audit entries; commands' output is not recorded)",
		Long: `Show a persistent sandbox's log. Unlike a docker container, a sandbox has no
main process and no console: each exec's output goes to whoever ran it and is
not recorded anywhere. What is recorded is shown here: the sandbox's entries
in the audit log (created, started, each exec with its command, exit status,
duration and who ran it, stopped, network refusals), as 'agentkernel audit
--sandbox NAME' shows them. --supervisor prints the diagnostics of the
sandbox's supervisor and init instead (its supervisor.log).`,
		Example: `  agentkernel logs dev
  agentkernel logs dev --tail 20 --json
  agentkernel logs dev --supervisor`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &ExitError{Code: ExitAgentkernel, Err: errors.New("logs: no sandbox NAME given\nusage: agentkernel logs [flags] NAME"),
					Hint: "'agentkernel ps -a' lists the sandboxes"}
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if tail < 0 {
				return usageError("--tail must be 0 (all) or more")
			}
			if err := validName(name); err != nil {
				return err
			}
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			ctx := cmdContext(cmd)
			sb, err := m.Get(ctx, name)
			if err != nil {
				return sandboxError(name, err)
			}
			if super {
				b, err := os.ReadFile(filepath.Join(sb.Dir, "supervisor.log"))
				if errors.Is(err, fs.ErrNotExist) {
					a.Infof("agentkernel: sandbox %s has no supervisor log yet (it has not been started)", name)
					return nil
				}
				if err != nil {
					return &ExitError{Code: ExitAgentkernel, Err: err}
				}
				_, err = a.Stdout.Write(lastLines(b, tail))
				return err
			}
			entries, err := m.Audit(ctx, audit.Filter{Sandbox: name, Last: tail})
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("audit log: %w", err)}
			}
			if asJSON {
				if entries == nil {
					entries = []audit.Entry{}
				}
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(entries)
			}
			a.Infof("agentkernel: what ran in %s (commands' output is not recorded: each exec's went to its caller)", name)
			return writeAuditTable(a.Stdout, entries)
		},
	}
	cmd.Flags().IntVarP(&tail, "tail", "n", 0, "only the newest N entries (lines with --supervisor)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the entries as a JSON array")
	cmd.Flags().BoolVar(&super, "supervisor", false, "print the supervisor's diagnostics (supervisor.log)")
	return cmd
}

// lastLines is the last n lines of b (all of it for n == 0).
func lastLines(b []byte, n int) []byte {
	if n <= 0 {
		return b
	}
	i := len(b)
	if i > 0 && b[i-1] == '\n' {
		i--
	}
	for ; n > 0; n-- {
		j := bytes.LastIndexByte(b[:i], '\n')
		if j < 0 {
			return b
		}
		i = j
	}
	return b[i+1:]
}
