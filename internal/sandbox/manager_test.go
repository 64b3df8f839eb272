package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/image"
)

// These tests cover the Manager's own decisions (backend choice, host
// fallback). The image store and the backends are stood in for by small
// in-test types because the decisions do not depend on how they work; the
// real store and backend are exercised by their own packages' tests and by
// the end-to-end run tests.

var errUnreachable = errors.New("registry unreachable")

type testImages struct {
	cached map[string]image.Rootfs
	calls  []string
}

func (t *testImages) Ensure(_ context.Context, ref, pull string) (image.Rootfs, error) {
	t.calls = append(t.calls, ref+"/"+pull)
	if r, ok := t.cached[ref]; ok {
		return r, nil
	}
	return image.Rootfs{}, fmt.Errorf("pull %s: %w", ref, errUnreachable)
}
func (t *testImages) Unreachable(err error) bool { return errors.Is(err, errUnreachable) }
func (t *testImages) Host() image.Rootfs         { return image.Rootfs{Ref: "host", Host: true} }

type recordingBackend struct{ got *Spec }

func (r *recordingBackend) Name() string { return "native" }
func (r *recordingBackend) Run(_ context.Context, s *Spec, _ Stdio) (Result, error) {
	r.got = s
	return Result{ExitCode: 7}, nil
}

func TestManagerHostFallback(t *testing.T) {
	for _, c := range []struct {
		rule     string
		fallback bool
	}{
		{"command", true}, {"project", true}, {"procfile", true}, {"default", true},
		{"flag", false}, {"config", false},
	} {
		imgs := &testImages{cached: map[string]image.Rootfs{}}
		be := &recordingBackend{}
		var warned []string
		m := NewManager(ManagerOptions{Images: imgs, Backends: []Backend{be}, Default: "native",
			Warn: func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) }})
		spec := &Spec{Image: "python:3.12-alpine", ImageRule: c.rule, Pull: "missing"}
		res, err := m.Run(context.Background(), "", spec, Stdio{})
		if c.fallback {
			if err != nil || !spec.Rootfs.Host || res.ExitCode != 7 || len(warned) != 1 || !strings.Contains(warned[0], "python:3.12-alpine") {
				t.Errorf("rule %s: want host fallback with one warning, got err=%v rootfs=%+v warned=%q", c.rule, err, spec.Rootfs, warned)
			}
			// What runs is recorded, and what was asked for beside it.
			if spec.Image != "host" || spec.RequestedImage != "python:3.12-alpine" || be.got == nil || be.got.Image != "host" {
				t.Errorf("rule %s: the fallback is recorded as image %q requested %q; want host for python:3.12-alpine", c.rule, spec.Image, spec.RequestedImage)
			}
		} else if err == nil || be.got != nil || len(warned) != 0 {
			t.Errorf("rule %s: a named image must never fall back (err=%v ran=%v warned=%q)", c.rule, err, be.got != nil, warned)
		}
	}
}

func TestManagerUsesCachedImage(t *testing.T) {
	want := image.Rootfs{Ref: "alpine", Layers: []string{"/l1"}}
	imgs := &testImages{cached: map[string]image.Rootfs{"alpine:3.20": want}}
	be := &recordingBackend{}
	m := NewManager(ManagerOptions{Images: imgs, Backends: []Backend{be}, Default: "native"})
	if _, err := m.Run(context.Background(), "", &Spec{Image: "alpine:3.20", ImageRule: "default", Pull: "never"}, Stdio{}); err != nil {
		t.Fatal(err)
	}
	if be.got == nil || be.got.Rootfs.Layers[0] != "/l1" || imgs.calls[0] != "alpine:3.20/never" {
		t.Fatalf("spec=%+v calls=%v", be.got, imgs.calls)
	}
}

func TestManagerBackendChoice(t *testing.T) {
	m := NewManager(ManagerOptions{Backends: []Backend{&recordingBackend{}}, Default: "native"})
	if b, err := m.Backend(""); err != nil || b.Name() != "native" {
		t.Fatalf("default: %v %v", b, err)
	}
	if _, err := m.Backend("NATIVE"); err != nil {
		t.Fatalf("names are case-insensitive: %v", err)
	}
	if _, err := m.Backend("microvm"); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "not built yet") {
		t.Fatalf("planned backend: %v", err)
	}
	if _, err := m.Backend("kubernetes"); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "-B kubernetes") {
		t.Fatalf("kubernetes in a Manager without it: %v", err)
	}
	if _, err := m.Backend("zzz"); err == nil || !strings.Contains(err.Error(), "unknown backend") || !strings.Contains(err.Error(), "native") {
		t.Fatalf("unknown backend: %v", err)
	}
}

// anticipatingBackend records Anticipate, forget and Run, in order.
type anticipatingBackend struct{ events []string }

func (a *anticipatingBackend) Name() string { return "native" }
func (a *anticipatingBackend) Run(_ context.Context, s *Spec, _ Stdio) (Result, error) {
	a.events = append(a.events, "run")
	return Result{}, nil
}
func (a *anticipatingBackend) Anticipate(s *Spec) func() {
	a.events = append(a.events, "anticipate")
	return func() { a.events = append(a.events, "forget") }
}

// TestManagerAnticipates: a backend that can anticipate a run is told
// before the root filesystem is prepared, and told to forget when the
// run will not come.
func TestManagerAnticipates(t *testing.T) {
	imgs := &testImages{cached: map[string]image.Rootfs{"busybox:1": {Ref: "busybox:1", Layers: []string{"/l"}}}}
	be := &anticipatingBackend{}
	m := NewManager(ManagerOptions{Images: imgs, Backends: []Backend{be}, Default: "native"})
	if _, err := m.Run(context.Background(), "", &Spec{Image: "busybox:1", ImageRule: "flag", Pull: "missing"}, Stdio{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(be.events, ","); got != "anticipate,run" {
		t.Errorf("events %s, want anticipate,run", got)
	}
	be.events = nil
	if _, err := m.Run(context.Background(), "", &Spec{Image: "missing:1", ImageRule: "flag", Pull: "missing"}, Stdio{}); err == nil {
		t.Fatal("a run of an image that cannot be pulled succeeded")
	}
	if got := strings.Join(be.events, ","); got != "anticipate,forget" {
		t.Errorf("events %s, want anticipate,forget", got)
	}
}

// checkingBackend refuses every spec in Check.
type checkingBackend struct{ recordingBackend }

func (c *checkingBackend) Check(*Spec) error { return fmt.Errorf("not here: %w", ErrUnsupported) }

// TestManagerChecksFirst: a backend's Check refuses a run before any
// image is prepared.
func TestManagerChecksFirst(t *testing.T) {
	imgs := &testImages{cached: map[string]image.Rootfs{"busybox:1": {Ref: "busybox:1", Layers: []string{"/l"}}}}
	be := &checkingBackend{}
	m := NewManager(ManagerOptions{Images: imgs, Backends: []Backend{be}, Default: "native"})
	_, err := m.Run(context.Background(), "", &Spec{Image: "busybox:1", ImageRule: "flag", Pull: "missing"}, Stdio{})
	if !errors.Is(err, ErrUnsupported) || len(imgs.calls) != 0 || be.got != nil {
		t.Fatalf("want the refusal before the image: %v, image calls %v, ran %v", err, imgs.calls, be.got != nil)
	}
}

// namedBackend is a recordingBackend under another name.
type namedBackend struct {
	recordingBackend
	name string
}

func (n *namedBackend) Name() string { return n.name }

// TestManagerAuto: "auto" is a known name; each run asks the ladder with
// its own spec and runs where it says; a ladder naming a backend the
// Manager lacks, or none at all, leaves the default; the choice is said.
func TestManagerAuto(t *testing.T) {
	imgs := &testImages{cached: map[string]image.Rootfs{"alpine": {Ref: "alpine", Layers: []string{"/l"}}}}
	native, gv := &recordingBackend{}, &namedBackend{name: "gvisor"}
	var asked []*Spec
	pick := "gvisor"
	var said []string
	m := NewManager(ManagerOptions{Images: imgs, Backends: []Backend{native, gv}, Default: "native",
		PickAuto: func(_ context.Context, s *Spec) (string, string) { asked = append(asked, s); return pick, "because" },
		Info:     func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) }})
	for _, n := range []string{"auto", "AUTO", " auto "} {
		if err := m.Known(n); err != nil {
			t.Errorf("Known(%q): %v", n, err)
		}
	}
	if err := m.Known("autox"); err == nil {
		t.Error("Known(autox) accepted")
	}
	spec := &Spec{Image: "alpine", Pull: "never"}
	if _, err := m.Run(context.Background(), "auto", spec, Stdio{}); err != nil {
		t.Fatal(err)
	}
	if gv.got != spec || native.got != nil || len(asked) != 1 || asked[0] != spec {
		t.Errorf("auto → gvisor: gvisor ran %v, native ran %v, ladder asked %d times", gv.got != nil, native.got != nil, len(asked))
	}
	if len(said) != 1 || !strings.Contains(said[0], "gvisor (because)") {
		t.Errorf("the choice said: %q", said)
	}
	pick = "firecracker"
	gv.got = nil
	if _, err := m.Run(context.Background(), "auto", &Spec{Image: "alpine", Pull: "never"}, Stdio{}); err != nil || native.got == nil || gv.got != nil {
		t.Errorf("a ladder naming a missing backend: err %v, native ran %v, want the default", err, native.got != nil)
	}
	if got := m.Pick(context.Background(), "docker", spec); got != "docker" {
		t.Errorf("Pick leaves other names: %q", got)
	}
	bare := NewManager(ManagerOptions{Backends: []Backend{native}, Default: "native"})
	if got := bare.Pick(context.Background(), "auto", spec); got != "native" {
		t.Errorf("no ladder: %q, want the default", got)
	}
}
