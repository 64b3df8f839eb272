package prestart

import "testing"

func TestIsRun(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"agentkernel", "run", "--", "true"}, true},
		{[]string{"agentkernel", "--data-dir", "/x", "run", "true"}, true},
		{[]string{"agentkernel", "-q", "-c", "run", "run"}, true},
		{[]string{"agentkernel", "--data-dir=/x", "--quiet", "run"}, true},
		{[]string{"agentkernel", "-c", "run"}, false},
		{[]string{"agentkernel", "exec", "run"}, false},
		{[]string{"agentkernel", "sandbox", "run"}, false},
		{[]string{"agentkernel", "--", "run"}, false},
		{[]string{"agentkernel"}, false},
		{[]string{"agentkernel:init"}, false},
		{nil, false},
	} {
		if got := IsRun(c.args); got != c.want {
			t.Errorf("IsRun(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
