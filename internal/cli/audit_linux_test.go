package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/audit"
)

// TestAuditTableEscapes: what a sandboxed command put in its argv, a
// recording's path or the entry's other text fields reaches the table as
// visible escapes, never as bytes the terminal acts on.
func TestAuditTableEscapes(t *testing.T) {
	code := 0
	e := audit.Entry{
		Time:      time.Unix(0, 0),
		Sandbox:   "box",
		Action:    "exec",
		ExitCode:  &code,
		Who:       "uid 0\x1b]0;owned\x07",
		Command:   []string{"sh", "-c", "echo \x1b[2J\x1b[31mred\r\nline\tcol\u202eevil\u009b1m\xff"},
		Recording: "/tmp/x\x1b[8m.cast",
	}
	var out strings.Builder
	if err := writeAuditTable(&out, []audit.Entry{e}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	body := strings.TrimSuffix(got, "\n")
	for i, c := range body {
		if c == '\n' && !strings.HasPrefix(body[i+1:], "1970") {
			t.Fatalf("a raw newline inside the entry's row:\n%q", got)
		}
		if (c < 0x20 && c != '\n') || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == '\u202e' || c == '\ufffd' {
			t.Fatalf("raw control character %U in the table:\n%q", c, got)
		}
	}
	for _, want := range []string{`\x1b[2J`, `\r\nline\tcol`, `\u202e`, `\u009b`, `\xff`, `x\x1b[8m.cast`, `\x1b]0;owned\x07`} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %s:\n%s", want, got)
		}
	}
}
