package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

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
		if s == "" || strings.ContainsAny(s, " \t'\"$`\\") {
			s = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
		out[i] = printable(s)
	}
	return strings.Join(out, " ")
}

// printable is s with what a terminal would act on instead of show
// written out as escapes: control characters (\n, \t, ESC and the rest of
// C0 and C1, DEL), bidirectional overrides and bytes that are not UTF-8.
// The audit log holds commands and paths that sandboxed agents chose; its
// table must not let them move the cursor, recolour or rewrite the
// terminal, or reorder what it shows.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02 15:04:05"), printable(e.Sandbox), printable(e.Action), exit, d, printable(e.Who), command)
	}
	return tw.Flush()
}
