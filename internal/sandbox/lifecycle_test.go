package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	image "github.com/agentkernel/agentkernel/internal/image/cache"
)

// memStore is a Store in memory: the records the Manager's policy works
// on, without the supervisor's processes.
type memStore struct {
	recs  map[string]*Info
	specs map[string]*Spec
}

func newMemStore() *memStore { return &memStore{recs: map[string]*Info{}, specs: map[string]*Spec{}} }

func (s *memStore) Create(_ context.Context, info *Info, spec *Spec) error {
	if _, ok := s.recs[info.Name]; ok {
		return fmt.Errorf("%q: %w", info.Name, ErrSandboxExists)
	}
	info.UUID, spec.ID = "uuid-"+info.Name, "id-"+info.Name
	c := *info
	s.recs[info.Name], s.specs[info.Name] = &c, spec
	return nil
}

func (s *memStore) Get(_ context.Context, name string) (*Info, error) {
	i, ok := s.recs[name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", name, ErrSandboxNotFound)
	}
	c := *i
	return &c, nil
}

func (s *memStore) List(ctx context.Context) ([]*Info, error) {
	var out []*Info
	for n := range s.recs {
		i, _ := s.Get(ctx, n)
		out = append(out, i)
	}
	return out, nil
}

func (s *memStore) Update(ctx context.Context, name string, fn func(*Info) error) (*Info, error) {
	i, ok := s.recs[name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", name, ErrSandboxNotFound)
	}
	if err := fn(i); err != nil {
		return nil, err
	}
	return s.Get(ctx, name)
}

func (s *memStore) Remove(_ context.Context, name string, _ bool) error {
	if _, ok := s.recs[name]; !ok {
		return fmt.Errorf("%q: %w", name, ErrSandboxNotFound)
	}
	delete(s.recs, name)
	return nil
}

func (s *memStore) Spec(_ context.Context, name string) (*Spec, error) {
	sp, ok := s.specs[name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", name, ErrSandboxNotFound)
	}
	return sp, nil
}

// TestManagerWithoutMechanism: a Manager given no part of the mechanism
// under persistent sandboxes answers every persistent operation with
// ErrUnsupported and says that they are not available at all.
func TestManagerWithoutMechanism(t *testing.T) {
	m := NewManager(ManagerOptions{})
	ctx := context.Background()
	ops := map[string]func() error{
		"create":  func() error { _, _, err := m.Create(ctx, CreateRequest{Name: "dev", Spec: &Spec{}}); return err },
		"get":     func() error { _, err := m.Get(ctx, "dev"); return err },
		"list":    func() error { _, err := m.List(ctx, ListOptions{}); return err },
		"update":  func() error { _, err := m.Update(ctx, "dev", Patch{}); return err },
		"start":   func() error { _, err := m.Start(ctx, "dev"); return err },
		"stop":    func() error { _, err := m.Stop(ctx, "dev"); return err },
		"restart": func() error { _, err := m.Restart(ctx, "dev"); return err },
		"remove":  func() error { return m.Remove(ctx, "dev", true) },
		"connect": func() error { _, err := m.Connect(ctx, "dev"); return err },
		"exec": func() error {
			_, err := m.Exec(ctx, "dev", ExecRequest{Args: []string{"ls"}}, Stdio{}, nil)
			return err
		},
		"read":   func() error { _, err := m.ReadFile(ctx, "dev", "/etc/hostname", io.Discard); return err },
		"extend": func() error { _, err := m.Extend(ctx, "dev", time.Hour); return err },
		"gc":     func() error { _, err := m.GC(ctx, true); return err },
		"stats":  func() error { _, _, err := m.Stats(ctx, 0); return err },
		"logs":   func() error { _, err := m.Logs(ctx, "dev"); return err },
	}
	for name, op := range ops {
		err := op()
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "not available on this system") {
			t.Errorf("%s without the mechanism: %v", name, err)
		}
	}
}

// TestManagerPartialMechanism: with only some parts wired, the
// operations those parts serve work, the others fail with
// ErrUnsupported naming what is missing, and nothing is half done (a
// create that would have to start the sandbox records nothing).
func TestManagerPartialMechanism(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	m := NewManager(ManagerOptions{Store: st})

	// A create that asks for a start needs a Supervisor: refused before
	// anything is recorded.
	_, _, err := m.Create(ctx, CreateRequest{Name: "dev", Spec: &Spec{Rootfs: hostRootfs()}, Start: true})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "starting and stopping") {
		t.Fatalf("create --start with records only: %v", err)
	}
	if len(st.recs) != 0 {
		t.Fatalf("a refused create left a record: %v", st.recs)
	}
	info, created, err := m.Create(ctx, CreateRequest{Name: "dev", Spec: &Spec{Rootfs: hostRootfs()}, Labels: map[string]string{"a": "b"}})
	if err != nil || !created || info.Name != "dev" || info.Status != StatusStopped {
		t.Fatalf("create with records only: %+v %v %v", info, created, err)
	}
	if l, err := m.List(ctx, ListOptions{Labels: map[string]string{"a": "b"}}); err != nil || len(l) != 1 {
		t.Fatalf("list: %v %v", l, err)
	}
	for name, op := range map[string]func() error{
		"start": func() error { _, err := m.Start(ctx, "dev"); return err },
		"stop":  func() error { _, err := m.Stop(ctx, "dev"); return err },
		"gc":    func() error { _, err := m.GC(ctx, false); return err },
	} {
		if err := op(); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "starting and stopping") {
			t.Errorf("%s with records only: %v", name, err)
		}
	}
	for name, op := range map[string]func() error{
		"connect": func() error { _, err := m.Connect(ctx, "dev"); return err },
		"exec": func() error {
			_, err := m.Exec(ctx, "dev", ExecRequest{Args: []string{"ls"}}, Stdio{}, nil)
			return err
		},
		"write": func() error {
			_, err := m.WriteFile(ctx, "dev", "/x", strings.NewReader("x"), 0o644)
			return err
		},
	} {
		if err := op(); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "connecting to them") {
			t.Errorf("%s with records only: %v", name, err)
		}
	}
	// Stats: what the store knows, the host's figures zero.
	us, host, err := m.Stats(ctx, 0)
	if err != nil || len(us) != 1 || us[0].Name != "dev" || us[0].Status != StatusStopped || host.Sandboxes != 1 || host.CPUs != 0 {
		t.Fatalf("stats with records only: %+v %+v %v", us, host, err)
	}
	if err := m.Remove(ctx, "dev", false); err != nil {
		t.Fatalf("remove with records only: %v", err)
	}

	// A connector without records: exec fails closed (its command rules
	// cannot be read), and nothing runs.
	sb := &standinSandbox{spec: &Spec{Commands: &CommandRules{}}}
	m = NewManager(ManagerOptions{Connector: sb})
	if _, err := m.Exec(ctx, "dev", ExecRequest{Args: []string{"ls"}}, Stdio{}, nil); !errors.Is(err, ErrUnsupported) || len(sb.ran) != 0 {
		t.Fatalf("exec without records: %v, ran %q", err, sb.ran)
	}
	if _, err := m.Connect(ctx, "dev"); err != nil {
		t.Fatalf("connect with a connector: %v", err)
	}
}

func hostRootfs() image.Rootfs { return image.Rootfs{Ref: "host", Host: true} }

// bootingBackend is a Backend that can boot persistent sandboxes (a
// Booter), refusing specs that ask for egress (a Checker).
type bootingBackend struct{ recordingBackend }

func (bootingBackend) Name() string { return "engine" }
func (bootingBackend) Boot(context.Context, *Spec, string, *os.File) (Instance, error) {
	return nil, ErrUnsupported
}
func (bootingBackend) Check(s *Spec) error {
	if s.Network.Mode == NetworkFull {
		return fmt.Errorf("no egress: %w", ErrUnsupported)
	}
	return nil
}

// ephemeralBackend runs ephemeral sandboxes only.
type ephemeralBackend struct{ recordingBackend }

func (ephemeralBackend) Name() string { return "ephemeral" }

// TestCreateOnBackend: a sandbox's backend is the default unless named;
// a named one must boot persistent sandboxes and accept the spec, and is
// recorded in the record and in the spec its supervisor reads.
func TestCreateOnBackend(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	m := NewManager(ManagerOptions{Store: st, Backends: []Backend{&recordingBackend{}, &bootingBackend{}, &ephemeralBackend{}}, Default: "native"})
	info, _, err := m.Create(ctx, CreateRequest{Name: "a", Spec: &Spec{Rootfs: hostRootfs()}})
	if err != nil || info.Backend != "native" || st.specs["a"].Backend != "" {
		t.Fatalf("default: %+v %+v %v", info, st.specs["a"], err)
	}
	info, _, err = m.Create(ctx, CreateRequest{Name: "b", Spec: &Spec{Rootfs: hostRootfs()}, Backend: "ENGINE"})
	if err != nil || info.Backend != "engine" || st.specs["b"].Backend != "engine" {
		t.Fatalf("engine: %+v %+v %v", info, st.specs["b"], err)
	}
	for _, c := range []struct {
		backend string
		spec    *Spec
		want    string
	}{
		{"ephemeral", &Spec{Rootfs: hostRootfs()}, "ephemeral sandboxes only"},
		{"engine", &Spec{Rootfs: hostRootfs(), Network: Network{Mode: NetworkFull}}, "no egress"},
		{"nosuch", &Spec{Rootfs: hostRootfs()}, "unknown backend"},
	} {
		_, _, err := m.Create(ctx, CreateRequest{Name: "c", Spec: c.spec, Backend: c.backend})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.backend, err, c.want)
		}
		if _, ok := st.recs["c"]; ok {
			t.Fatalf("%s: a refused create left a record", c.backend)
		}
	}
}
