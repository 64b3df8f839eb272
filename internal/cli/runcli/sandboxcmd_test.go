package runcli

import (
	"errors"
	"reflect"
	"testing"
)

// TestParseSandboxCommand: the one parser of exec, attach and cp reads
// their command lines as cobra read them: global flags on either side
// of the command's name, exec's flags ending at NAME, attach's and cp's
// anywhere, a "--" before exec's command dropped.
func TestParseSandboxCommand(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		want    SandboxCommandLine
		dataDir string
		quiet   bool
	}{
		{argv: []string{"exec", "dev", "ls", "-l"}, want: SandboxCommandLine{Command: "exec", Name: "dev", Args: []string{"ls", "-l"}}},
		{argv: []string{"exec", "dev", "--", "ls", "--help"}, want: SandboxCommandLine{Command: "exec", Name: "dev", Args: []string{"ls", "--help"}}},
		{argv: []string{"exec", "--", "dev", "true"}, want: SandboxCommandLine{Command: "exec", Name: "dev", Args: []string{"true"}}},
		{argv: []string{"exec", "dev", "--", "--"}, want: SandboxCommandLine{Command: "exec", Name: "dev", Args: []string{"--"}}},
		{
			argv:    []string{"--data-dir", "/d", "-q", "exec", "-it", "-e", "A=1", "-e", "B", "--workdir=/w", "-u", "1:2", "dev", "sh", "-c", "x"},
			want:    SandboxCommandLine{Command: "exec", Name: "dev", Args: []string{"sh", "-c", "x"}, Exec: ExecOptions{Env: []string{"A=1", "B"}, Workdir: "/w", User: "1:2", TTY: true, Interactive: true}},
			dataDir: "/d", quiet: true,
		},
		{
			argv:    []string{"exec", "--data-dir=/d", "dev", "--data-dir", "x"},
			want:    SandboxCommandLine{Command: "exec", Name: "dev", Args: []string{"--data-dir", "x"}},
			dataDir: "/d",
		},
		{
			argv: []string{"attach", "dev", "--shell", "/bin/ash", "-w", "/w"},
			want: SandboxCommandLine{Command: "attach", Name: "dev", Exec: ExecOptions{Shell: "/bin/ash", Workdir: "/w"}},
		},
		// --record [FILE]: bare, with =FILE, and FILE as its own word
		// before or after NAME.
		{argv: []string{"attach", "--record", "dev"}, want: SandboxCommandLine{Command: "attach", Name: "dev", Exec: ExecOptions{Record: RecordFlag{On: true}}}},
		{argv: []string{"attach", "dev", "--record"}, want: SandboxCommandLine{Command: "attach", Name: "dev", Exec: ExecOptions{Record: RecordFlag{On: true}}}},
		{argv: []string{"attach", "--record=/t/s.cast", "dev"}, want: SandboxCommandLine{Command: "attach", Name: "dev", Exec: ExecOptions{Record: RecordFlag{On: true, File: "/t/s.cast"}}}},
		{argv: []string{"attach", "--record", "s.cast", "--record-input", "dev"}, want: SandboxCommandLine{Command: "attach", Name: "dev", Exec: ExecOptions{Record: RecordFlag{On: true, File: "s.cast"}, RecordInput: true}}},
		{argv: []string{"attach", "dev", "--record", "rec"}, want: SandboxCommandLine{Command: "attach", Name: "dev", Exec: ExecOptions{Record: RecordFlag{On: true, File: "rec"}}}},
		{argv: []string{"cp", "./a", "-q", "dev:/b"}, want: SandboxCommandLine{Command: "cp", Name: "dev", Args: []string{"./a", "dev:/b"}}, quiet: true},
		{argv: []string{"cp", "dev:", "."}, want: SandboxCommandLine{Command: "cp", Name: "dev", Args: []string{"dev:", "."}}},
		{argv: []string{"stats"}, want: SandboxCommandLine{Command: "stats"}},
		{argv: []string{"stats", "--json"}, want: SandboxCommandLine{Command: "stats", Stats: StatsOptions{JSON: true}}},
		{
			argv:    []string{"stats", "dev", "--json", "-q", "web", "--data-dir=/d"},
			want:    SandboxCommandLine{Command: "stats", Name: "dev", Args: []string{"dev", "web"}, Stats: StatsOptions{JSON: true}},
			dataDir: "/d", quiet: true,
		},
		{argv: []string{"stats", "--", "dev"}, want: SandboxCommandLine{Command: "stats", Name: "dev", Args: []string{"dev"}}},
	} {
		a := &App{}
		l, err := a.ParseSandboxCommand(tc.argv)
		if err != nil {
			t.Errorf("%q: %v", tc.argv, err)
			continue
		}
		if !reflect.DeepEqual(*l, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.argv, *l, tc.want)
		}
		if tc.dataDir == "" {
			tc.dataDir = DefaultDataDir()
		}
		if a.DataDir != tc.dataDir || a.Quiet != tc.quiet {
			t.Errorf("%q: global flags data-dir %q quiet %v", tc.argv, a.DataDir, a.Quiet)
		}
	}
}

// TestParseSandboxCommandRefuses: what the parser refuses, in cobra's
// words and exit status, and what it leaves to agentkernel-full.
func TestParseSandboxCommandRefuses(t *testing.T) {
	const execHint = "see 'agentkernel exec --help'; 'agentkernel attach NAME' opens a shell"
	for _, tc := range []struct {
		argv []string
		msg  string // "" for ErrNeedsFull
		hint string
	}{
		{argv: []string{"run", "true"}},
		{argv: []string{"sandbox", "exec"}},
		{argv: []string{"--bogus", "exec", "dev", "true"}},
		{argv: []string{"exec", "-h"}},
		{argv: []string{"attach", "dev", "--help"}},
		{argv: []string{"exec", "--bogus", "dev", "true"}, msg: "unknown flag: --bogus", hint: "see 'agentkernel exec --help'"},
		{argv: []string{"cp", "-t", "a", "dev:/b"}, msg: "unknown shorthand flag: 't' in -t", hint: "see 'agentkernel cp --help'"},
		{argv: []string{"exec", "dev"}, msg: "exec: no COMMAND given to run in sandbox \"dev\"\nusage: agentkernel exec [flags] NAME [--] COMMAND [ARG...]", hint: execHint},
		{argv: []string{"exec", "-it", "dev", "--"}, msg: "exec: no COMMAND given to run in sandbox \"dev\"\nusage: agentkernel exec [flags] NAME [--] COMMAND [ARG...]", hint: execHint},
		{argv: []string{"exec"}, msg: "exec: no sandbox NAME and no COMMAND given\nusage: agentkernel exec [flags] NAME [--] COMMAND [ARG...]", hint: execHint},
		{argv: []string{"-q", "exec", "--"}, msg: "exec: no sandbox NAME and no COMMAND given\nusage: agentkernel exec [flags] NAME [--] COMMAND [ARG...]", hint: execHint},
		{argv: []string{"exec", "a/../b", "true"}, msg: `sandbox name "a/../b" contains invalid character '/' (use letters, digits, '-' and '_')`},
		{argv: []string{"attach"}, msg: "attach: no sandbox NAME given\nusage: agentkernel attach [flags] NAME", hint: "see 'agentkernel attach --help'; 'agentkernel sandbox list' shows the running sandboxes"},
		{argv: []string{"attach", "a", "b"}, msg: "accepts 1 arg(s), received 2"},
		{argv: []string{"attach", "a", "--record", "--", "b"}, msg: "accepts 1 arg(s), received 2"},
		{argv: []string{"attach", "--record-input", "dev"}, msg: "attach: --record-input goes with --record", hint: "see 'agentkernel attach --help'"},
		{argv: []string{"attach", "..", "--shell", "sh"}, msg: `sandbox name ".." contains invalid character '.' (use letters, digits, '-' and '_')`},
		{argv: []string{"cp", "a"}, msg: "accepts 2 arg(s), received 1"},
		{argv: []string{"cp", "a", "b"}, msg: "cp: exactly one of SRC and DEST must be NAME:/path", hint: "see 'agentkernel --help'"},
		{argv: []string{"cp", "dev:/a", "dev:/b"}, msg: "cp: exactly one of SRC and DEST must be NAME:/path", hint: "see 'agentkernel --help'"},
		{argv: []string{"cp", "../x:/a", "b"}, msg: "cp: exactly one of SRC and DEST must be NAME:/path", hint: "see 'agentkernel --help'"},
		{argv: []string{"stats", "dev", "-h"}},
		{argv: []string{"stats", "--bogus"}, msg: "unknown flag: --bogus", hint: "see 'agentkernel stats --help'"},
		{argv: []string{"stats", "-i", "dev"}, msg: "unknown shorthand flag: 'i' in -i", hint: "see 'agentkernel stats --help'"},
		{argv: []string{"stats", "dev", "../x"}, msg: `sandbox name "../x" contains invalid character '.' (use letters, digits, '-' and '_')`},
		{argv: []string{"stats", "", "dev"}, msg: "sandbox name cannot be empty"},
		{argv: []string{"stats", "--json", "dev", "a/b"}, msg: `sandbox name "a/b" contains invalid character '/' (use letters, digits, '-' and '_')`},
	} {
		_, err := (&App{}).ParseSandboxCommand(tc.argv)
		if tc.msg == "" {
			if !errors.Is(err, ErrNeedsFull) {
				t.Errorf("%q: %v, want ErrNeedsFull", tc.argv, err)
			}
			continue
		}
		if err == nil || errors.Is(err, ErrNeedsFull) || err.Error() != tc.msg {
			t.Errorf("%q: %v, want %q", tc.argv, err, tc.msg)
			continue
		}
		var ee *ExitError
		hint := ""
		if errors.As(err, &ee) {
			hint = ee.Hint
			if ee.Code != ExitAgentkernel {
				t.Errorf("%q: exit status %d", tc.argv, ee.Code)
			}
		}
		if hint != tc.hint {
			t.Errorf("%q: hint %q, want %q", tc.argv, hint, tc.hint)
		}
	}
}
