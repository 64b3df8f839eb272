package runcli

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseExecFlags: exec's --env, --workdir, --sudo, --timeout, -d and
// the detached-command operations, in the one parser both binaries use.
func TestParseExecFlags(t *testing.T) {
	const id = "0123456789abcdef"
	for _, tc := range []struct {
		argv []string
		want SandboxCommandLine
	}{
		{
			argv: []string{"exec", "--env", "K=V", "-e", "X=1", "--workdir", "/w", "--sudo", "--timeout", "1m30s", "dev", "--", "make"},
			want: SandboxCommandLine{Command: "exec", Name: "dev", Args: []string{"make"},
				Exec: ExecOptions{Env: []string{"K=V", "X=1"}, Workdir: "/w", Sudo: true, Timeout: 90 * time.Second}},
		},
		{
			argv: []string{"exec", "-d", "--json", "dev", "sleep", "9"},
			want: SandboxCommandLine{Command: "exec", Name: "dev", Args: []string{"sleep", "9"}, Exec: ExecOptions{Detach: true, JSON: true}},
		},
		// Flags end at NAME: "-d" after it is the command's.
		{
			argv: []string{"exec", "dev", "-d", "--sudo"},
			want: SandboxCommandLine{Command: "exec", Name: "dev", Args: []string{"-d", "--sudo"}},
		},
		{argv: []string{"exec", "--list", "dev"}, want: SandboxCommandLine{Command: "exec", Name: "dev", Exec: ExecOptions{List: true}}},
		{argv: []string{"exec", "--status", id, "dev"}, want: SandboxCommandLine{Command: "exec", Name: "dev", Exec: ExecOptions{Status: id}}},
		{
			argv: []string{"exec", "--logs", id, "--stderr", "--offset", "12", "dev"},
			want: SandboxCommandLine{Command: "exec", Name: "dev", Exec: ExecOptions{Logs: id, Stderr: true, Offset: 12}},
		},
		{argv: []string{"exec", "--kill", id, "--json", "dev"}, want: SandboxCommandLine{Command: "exec", Name: "dev", Exec: ExecOptions{Kill: id, JSON: true}}},
	} {
		l, err := (&App{}).ParseSandboxCommand(tc.argv)
		if err != nil {
			t.Errorf("%q: %v", tc.argv, err)
			continue
		}
		if !reflect.DeepEqual(*l, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.argv, *l, tc.want)
		}
	}
	for _, tc := range []struct {
		argv []string
		msg  string
	}{
		{[]string{"exec", "--sudo", "-u", "1000", "dev", "id"}, "--sudo and --user"},
		{[]string{"exec", "--timeout", "-5s", "dev", "id"}, "--timeout must be positive"},
		{[]string{"exec", "--timeout", "soon", "dev", "id"}, "invalid argument"},
		{[]string{"exec", "-d", "-t", "dev", "sh"}, "has no terminal"},
		{[]string{"exec", "-d", "-i", "dev", "sh"}, "has no terminal"},
		{[]string{"exec", "--list", "--kill", id, "dev"}, "one at a time"},
		{[]string{"exec", "--list", "dev", "ls"}, "take the sandbox NAME alone"},
		{[]string{"exec", "--list"}, "take the sandbox NAME alone"},
		{[]string{"exec", "--list", "-d", "dev"}, "take no command flags"},
		{[]string{"exec", "--status", "../../x", "dev"}, "invalid detached command id"},
		{[]string{"exec", "--kill", "ABCDEF0123456789", "dev"}, "invalid detached command id"},
		{[]string{"exec", "--stderr", "dev", "ls"}, "go with --logs"},
		{[]string{"exec", "--logs", id, "--offset", "-1", "dev"}, "--offset must be 0 or more"},
		{[]string{"exec", "--list", "bad/name"}, "name"},
	} {
		_, err := (&App{}).ParseSandboxCommand(tc.argv)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: want exit 125 saying %q, got %v", tc.argv, tc.msg, err)
		}
	}
}
