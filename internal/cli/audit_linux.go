package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/audit"
)

func newAuditCmd(a *App) *cobra.Command {
	var name string
	var last int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log of persistent sandboxes",
		Long: `Show the audit log: every create, start, stop, remove and exec of a
persistent sandbox, with the command, exit code, duration and who ran it.
The log is append-only JSON lines at <data-dir>/audit.jsonl; --json prints
its entries as one JSON array.`,
		Example: `  agentkernel audit --last 20
  agentkernel audit --sandbox dev --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if last < 0 {
				return usageError("--last must be 0 (all) or more")
			}
			if name != "" {
				if err := validName(name); err != nil {
					return err
				}
			}
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			entries, err := m.Audit(cmd.Context(), audit.Filter{Sandbox: name, Last: last})
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("audit log: %w", err)}
			}
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(entries)
			}
			return writeAuditTable(a.Stdout, entries)
		},
	}
	cmd.Flags().StringVar(&name, "sandbox", "", "only entries of this sandbox")
	cmd.Flags().IntVarP(&last, "last", "n", 0, "only the newest N entries")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// quoteArgs renders argv for a table cell: words with spaces or quotes
// are single-quoted, newlines shown as \n.
func quoteArgs(argv []string) string {
	out := make([]string, len(argv))
	for i, s := range argv {
		s = strings.ReplaceAll(s, "\n", `\n`)
		if s == "" || strings.ContainsAny(s, " \t'\"$`\\") {
			s = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
		out[i] = s
	}
	return strings.Join(out, " ")
}

// writeAuditTable writes audit entries as audit's (and logs's) table.
func writeAuditTable(w io.Writer, entries []audit.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tSANDBOX\tACTION\tEXIT\tDURATION\tWHO\tCOMMAND")
	for _, e := range entries {
		exit := "-"
		if e.ExitCode != nil {
			exit = fmt.Sprint(*e.ExitCode)
		}
		if e.Error != "" && e.ExitCode == nil {
			exit = "error"
		}
		d := time.Duration(e.DurationMS * float64(time.Millisecond)).Round(100 * time.Microsecond)
		command := quoteArgs(e.Command)
		if e.Recording != "" {
			command += " (recorded to " + quoteArgs([]string{e.Recording}) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02 15:04:05"), e.Sandbox, e.Action, exit, d, e.Who, command)
	}
	return tw.Flush()
}
