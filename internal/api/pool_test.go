package api

import (
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func TestPoolKey(t *testing.T) {
	base := func() *sandbox.Spec {
		return &sandbox.Spec{ID: "a", Image: "host", ImageRule: "flag", Profile: "moderate", Args: []string{"true"},
			Env: []string{"A=1"}, Workdir: "/workspace", Mounts: []sandbox.Mount{{Kind: sandbox.MountBind, Source: "/p", Dest: "/workspace"}}}
	}
	k0, _ := poolKey(base())
	same := base()
	same.ID, same.Args, same.ImageRule = "b", []string{"sh", "-c", "echo"}, "command"
	if k, _ := poolKey(same); k != k0 {
		t.Errorf("the command, ID or image rule changed the key")
	}
	for name, change := range map[string]func(*sandbox.Spec){
		"image":   func(s *sandbox.Spec) { s.Image = "python:3" },
		"profile": func(s *sandbox.Spec) { s.Profile = "restrictive" },
		"env":     func(s *sandbox.Spec) { s.Env = []string{"A=2"} },
		"workdir": func(s *sandbox.Spec) { s.Workdir = "/" },
		"mounts":  func(s *sandbox.Spec) { s.Mounts[0].Source = "/q" },
		"network": func(s *sandbox.Spec) { s.Network.Mode = sandbox.NetworkFull },
	} {
		s := base()
		change(s)
		if k, _ := poolKey(s); k == k0 {
			t.Errorf("%s: same key", name)
		}
	}
	if !poolable(base()) {
		t.Errorf("a plain run is not poolable")
	}
	to := base()
	to.Resources.Timeout = time.Second
	if !poolable(to) {
		t.Errorf("a run with a timeout is not poolable")
	}
	if k, _ := poolKey(to); k == k0 {
		t.Errorf("timeout: same key")
	}
	for name, change := range map[string]func(*sandbox.Spec){
		"tty":       func(s *sandbox.Spec) { s.TTY = true },
		"keep":      func(s *sandbox.Spec) { s.Keep = true },
		"no args":   func(s *sandbox.Spec) { s.Args = nil },
		"huge argv": func(s *sandbox.Spec) { s.Args = []string{strings.Repeat("x", 40<<10)} },
	} {
		s := base()
		change(s)
		if poolable(s) {
			t.Errorf("%s: poolable", name)
		}
	}
}
