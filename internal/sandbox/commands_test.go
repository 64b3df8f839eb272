package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/image"
)

// The Manager's command rules on every path that starts a command. The
// backend, the prepared sandbox and the persistent-sandbox mechanism are
// stood in for by small in-test types (as in manager_test.go): what is
// tested is that the Manager refuses before it reaches them. The real
// paths (CLI, HTTP and MCP exec into a real sandbox) are in test/e2e.

func TestCommandRulesCheck(t *testing.T) {
	block := &CommandRules{Block: []string{"curl", "/usr/bin/wget"}, BlockFrom: "/p/agentkernel.toml:4"}
	allow := &CommandRules{Allow: []string{"python3", "/bin/sh"}, AllowlistOnly: true, AllowFrom: "/p/agentkernel.toml:9"}
	tests := []struct {
		r    *CommandRules
		args []string
		ok   bool
	}{
		{nil, []string{"curl"}, true},
		{&CommandRules{}, []string{"curl"}, true},
		{block, []string{"ls"}, true},
		{block, []string{"curl", "x"}, false},
		{block, []string{"/opt/bin/curl"}, false},
		{block, []string{"./curl"}, false},
		{block, []string{"/usr/bin/../bin/curl"}, false},
		{block, []string{"curl -s x"}, false},
		{block, []string{"  curl"}, false},
		{block, []string{"/usr/bin/wget"}, false},
		{block, []string{"wget"}, true}, // blocked by full path only
		{block, nil, true},              // the image's entrypoint
		{block, []string{""}, true},
		{allow, []string{"python3", "x.py"}, true},
		{allow, []string{"/usr/local/bin/python3"}, true},
		{allow, []string{"/bin/sh", "-c", "curl x"}, true}, // the documented bypass
		{allow, []string{"node"}, false},
		{allow, []string{"curl -s"}, false},
		{&CommandRules{Allow: []string{"curl"}, Block: []string{"curl"}, AllowlistOnly: true}, []string{"curl"}, false}, // block wins
	}
	for _, tt := range tests {
		err := tt.r.Check(tt.args)
		if (err == nil) != tt.ok {
			t.Errorf("%+v.Check(%q) = %v", tt.r, tt.args, err)
		}
		if err != nil && (!errors.Is(err, ErrCommandRefused) || !errors.Is(err, ErrCannotInvoke)) {
			t.Errorf("%+v.Check(%q) = %v: must match ErrCommandRefused and ErrCannotInvoke", tt.r, tt.args, err)
		}
	}
	if err := block.Check([]string{"curl"}); err == nil || err.Error() != `command "curl" is blocked by [security.commands] block (set in /p/agentkernel.toml:4)` {
		t.Errorf("block message: %v", err)
	}
	if err := allow.Check([]string{"node"}); err == nil || err.Error() != `command "node" is not in [security.commands] allow, and allowlist_only = true (set in /p/agentkernel.toml:9)` {
		t.Errorf("allow message: %v", err)
	}
}

func TestManagerRunRefusesBeforePreparing(t *testing.T) {
	imgs := &testImages{cached: map[string]image.Rootfs{"alpine:3.20": {Ref: "alpine", Layers: []string{"/l"}}}}
	be := &anticipatingBackend{}
	m := NewManager(ManagerOptions{Images: imgs, Backends: []Backend{be}, Default: "native"})
	spec := &Spec{Image: "alpine:3.20", ImageRule: "flag", Args: []string{"curl", "x"},
		Commands: &CommandRules{Block: []string{"curl"}}}
	_, err := m.Run(context.Background(), "", spec, Stdio{})
	if !errors.Is(err, ErrCommandRefused) {
		t.Fatalf("run of a blocked command: %v", err)
	}
	if len(be.events) != 0 || len(imgs.calls) != 0 {
		t.Errorf("a refused run reached the backend (%v) or the image store (%v)", be.events, imgs.calls)
	}
	spec.Args = []string{"ls"}
	if _, err := m.Run(context.Background(), "", spec, Stdio{}); err != nil {
		t.Fatalf("allowed command: %v", err)
	}
}

// preparingBackend hands out stand-in prepared sandboxes.
type preparingBackend struct {
	anticipatingBackend
	made []*standinPrepared
}

func (p *preparingBackend) Prepare(_ context.Context, spec *Spec) (Prepared, error) {
	sb := &standinPrepared{}
	p.made = append(p.made, sb)
	return sb, nil
}

type standinPrepared struct {
	ran    []string
	closed bool
}

func (s *standinPrepared) Run(_ context.Context, args []string, _ Stdio, _ <-chan os.Signal) (Result, error) {
	s.ran = args
	return Result{}, nil
}
func (s *standinPrepared) Close()             { s.closed = true }
func (s *standinPrepared) Warnings() []string { return []string{"w"} }

// TestManagerPreparedRefuses: a warm-pool or daemon run (a prepared
// sandbox run later with its command) is checked against the rules of
// the spec it was prepared for; the refused sandbox is discarded.
func TestManagerPreparedRefuses(t *testing.T) {
	be := &preparingBackend{}
	m := NewManager(ManagerOptions{Backends: []Backend{be}, Default: "native"})
	spec := &Spec{Rootfs: image.Rootfs{Host: true}, Commands: &CommandRules{Block: []string{"curl"}, BlockFrom: "cfg:2"}}
	sb, err := m.Prepare(context.Background(), "", spec)
	if err != nil {
		t.Fatal(err)
	}
	if w := sb.Warnings(); len(w) != 1 {
		t.Errorf("warnings not passed through: %v", w)
	}
	if _, err := sb.Run(context.Background(), []string{"/usr/bin/curl"}, Stdio{}, nil); !errors.Is(err, ErrCommandRefused) || !strings.Contains(err.Error(), "cfg:2") {
		t.Fatalf("prepared run of a blocked command: %v", err)
	}
	if be.made[0].ran != nil || !be.made[0].closed {
		t.Errorf("refused prepared sandbox: ran %q, closed %v", be.made[0].ran, be.made[0].closed)
	}
	sb, _ = m.Prepare(context.Background(), "", spec)
	if _, err := sb.Run(context.Background(), []string{"ls"}, Stdio{}, nil); err != nil || be.made[1].ran[0] != "ls" {
		t.Fatalf("allowed prepared run: %v %q", err, be.made[1].ran)
	}
}

// standinSandbox is one running sandbox whose spec is given (a Store
// and a Connector); its Conn records the commands it would run.
type standinSandbox struct {
	Store   // the methods Exec does not use panic (nil interface)
	spec    *Spec
	specErr error
	ran     [][]string
}

func (s *standinSandbox) Connect(context.Context, string) (Conn, error) {
	return &standinConn{l: s}, nil
}
func (s *standinSandbox) Spec(context.Context, string) (*Spec, error) { return s.spec, s.specErr }

type standinConn struct {
	Conn
	l *standinSandbox
}

func (c *standinConn) Exec(_ context.Context, req ExecRequest, _ Stdio, _ <-chan os.Signal) (Result, error) {
	c.l.ran = append(c.l.ran, req.Args)
	return Result{}, nil
}
func (c *standinConn) Close() error { return nil }

func TestManagerExecRefuses(t *testing.T) {
	log := audit.New(t.TempDir())
	lc := &standinSandbox{spec: &Spec{Commands: &CommandRules{Block: []string{"curl"}, BlockFrom: "/p/agentkernel.toml:3"}}}
	var warned []string
	m := NewManager(ManagerOptions{Store: lc, Connector: lc, Audit: log, Who: "test",
		Warn: func(f string, a ...any) { warned = append(warned, f) }})
	ctx := context.Background()

	_, err := m.Exec(ctx, "dev", ExecRequest{Args: []string{"curl", "example.com"}}, Stdio{Stdout: io.Discard}, nil)
	if !errors.Is(err, ErrCommandRefused) || !errors.Is(err, ErrCannotInvoke) {
		t.Fatalf("exec of a blocked command: %v", err)
	}
	want := `sandbox dev: command "curl" is blocked by [security.commands] block (set in /p/agentkernel.toml:3 when the sandbox was created)`
	if err.Error() != want {
		t.Errorf("message\n got %s\nwant %s", err, want)
	}
	if len(lc.ran) != 0 {
		t.Fatalf("the refused command reached the sandbox: %q", lc.ran)
	}
	if _, err := m.Exec(ctx, "dev", ExecRequest{Args: []string{"ls"}}, Stdio{}, nil); err != nil || len(lc.ran) != 1 {
		t.Fatalf("allowed exec: %v %q", err, lc.ran)
	}
	// The refusal is in the audit log, with docker's "cannot invoke" code.
	entries, err := log.Read(audit.Filter{Sandbox: "dev"})
	if err != nil || len(entries) != 2 {
		t.Fatalf("audit: %v %+v", err, entries)
	}
	if e := entries[0]; e.ExitCode == nil || *e.ExitCode != 126 || !strings.Contains(e.Error, "blocked") {
		t.Errorf("audit of the refusal: %+v", e)
	}

	// Rules that cannot be read refuse the command (fail closed).
	lc.specErr = errors.New("spec.json: permission denied")
	if _, err := m.Exec(ctx, "dev", ExecRequest{Args: []string{"ls"}}, Stdio{}, nil); err == nil || len(lc.ran) != 1 {
		t.Fatalf("exec with unreadable rules: %v %q", err, lc.ran)
	}

	// A sandbox created before the rules were recorded: not checked, and
	// each exec says so.
	lc.spec, lc.specErr = &Spec{}, nil
	if _, err := m.Exec(ctx, "old", ExecRequest{Args: []string{"curl"}}, Stdio{}, nil); err != nil || len(lc.ran) != 2 {
		t.Fatalf("exec in a sandbox without recorded rules: %v %q", err, lc.ran)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "not checked") {
		t.Errorf("warnings %q", warned)
	}
}
