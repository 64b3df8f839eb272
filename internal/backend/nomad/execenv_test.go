package nomad

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/envblock"
)

// TestExecWithEnv: the node's exec gets --env-stdin and no value of the
// environment among its arguments; the block carries the entries as
// given; entries that are not KEY=VALUE are refused.
func TestExecWithEnv(t *testing.T) {
	env := []string{"TOKEN=s3cr3t", "ML=a\nb", "E="}
	x, err := execWithEnv("box", []string{"sh", "-c", "env"}, env, "/w", "1000", true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"exec", "-i", "-t", "--env-stdin", "-w", "/w", "-u", "1000", "box", "--", "sh", "-c", "env"}
	if !reflect.DeepEqual(x.args, want) || !x.tty {
		t.Errorf("args = %q", x.args)
	}
	if strings.Contains(strings.Join(x.args, " "), "s3cr3t") {
		t.Errorf("a value is on the command line: %q", x.args)
	}
	got, err := envblock.Read(bytes.NewReader(x.block))
	if err != nil || !reflect.DeepEqual(got, env) {
		t.Errorf("block = %q, %v", got, err)
	}
	// No environment: no flag, no block (a node's agentkernel without
	// --env-stdin still runs such commands).
	x, err = execWithEnv("box", []string{"true"}, nil, "", "", false)
	if err != nil || x.block != nil || !reflect.DeepEqual(x.args, []string{"exec", "-i", "box", "--", "true"}) {
		t.Errorf("no env: %+v %v", x, err)
	}
	for _, e := range []string{"HOME", "=v", "A=b\x00c"} {
		if _, err := execWithEnv("box", []string{"true"}, []string{e}, "", "", false); err == nil {
			t.Errorf("%q taken", e)
		}
	}
	if _, err := execArgs("box", []string{"true"}, []string{"A=b"}, "", "", false); err == nil {
		t.Error("execArgs took an environment")
	}
}
