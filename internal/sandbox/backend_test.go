package sandbox

import "testing"

// TestOOMText: what a result says of the memory limit's OOM kills, and
// how a note joins a command's output.
func TestOOMText(t *testing.T) {
	for _, c := range []struct {
		res  Result
		want string
	}{
		{Result{ExitCode: 137, Signal: 9}, ""},
		{Result{ExitCode: 137, Signal: 9, OOMKills: 1, MemoryMB: 16}, "the command was killed: out of memory (limit 16 MiB)"},
		{Result{ExitCode: 137, Signal: 9, OOMKills: 2, MemoryMB: 2048}, "the command was killed: out of memory (limit 2 GiB)"},
		{Result{ExitCode: 0, OOMKills: 1, MemoryMB: 1536}, "a process in the sandbox was killed: out of memory (limit 1536 MiB)"},
		{Result{ExitCode: 143, Signal: 15, OOMKills: 3, MemoryMB: 64}, "3 processes in the sandbox were killed: out of memory (limit 64 MiB)"},
	} {
		if got := c.res.OOMText(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.res, got, c.want)
		}
		if got := c.res.CommandOOMKilled(); got != (c.res.OOMKills > 0 && c.res.Signal == 9) {
			t.Errorf("%+v: CommandOOMKilled %v", c.res, got)
		}
	}
	for _, c := range []struct{ out, note, want string }{
		{"", "", ""},
		{"x", "", "x"},
		{"", "n", "agentkernel: n\n"},
		{"x", "n", "x\nagentkernel: n\n"},
		{"x\n", "n", "x\nagentkernel: n\n"},
	} {
		if got := AppendNote(c.out, c.note); got != c.want {
			t.Errorf("AppendNote(%q, %q) = %q, want %q", c.out, c.note, got, c.want)
		}
	}
}
