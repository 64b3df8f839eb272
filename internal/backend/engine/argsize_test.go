package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestCheckArgSize: an argv or environment no execve could take is
// refused as "cannot invoke" before the engine sees it; 1 MiB of argv,
// which a kernel takes, is not.
func TestCheckArgSize(t *testing.T) {
	arg := strings.Repeat("A", maxArgStrlen-1)
	var big, small []string
	for i := 0; i < 512; i++ {
		big = append(big, arg)
	}
	for i := 0; i < 8; i++ {
		small = append(small, arg)
	}
	if err := checkArgSize(append([]string{"/probe"}, small...), []string{"A=b"}); err != nil {
		t.Errorf("1 MiB of argv: %v", err)
	}
	for name, c := range map[string][2][]string{
		"64 MiB of argv":  {append([]string{"/probe"}, big...), nil},
		"a huge variable": {[]string{"/probe"}, []string{"A=" + strings.Repeat("x", maxArgStrlen)}},
		"a huge argument": {[]string{"/probe", strings.Repeat("x", maxArgStrlen)}, nil},
		"32 MiB of env":   {[]string{"/probe"}, big[:256]},
	} {
		if err := checkArgSize(c[0], c[1]); !errors.Is(err, sandbox.ErrCannotInvoke) {
			t.Errorf("%s: %v, want ErrCannotInvoke", name, err)
		}
	}
}

// TestPodmanUserCaps: podman would put the profile's capabilities in a
// non-root user's effective and ambient sets, so such a user gets none
// there; root keeps them, and docker (bounding set only) is unchanged.
func TestPodmanUserCaps(t *testing.T) {
	caps := []string{"CAP_CHOWN", "CAP_SETUID"}
	for _, c := range []struct {
		engine, user, imageUser string
		want                    int
	}{
		{"podman", "1000:1000", "", 0},
		{"podman", "user", "", 0},
		{"podman", "", "app", 0},
		{"podman", "", "", 2},
		{"podman", "root", "app", 2},
		{"podman", "0:1000", "", 2},
		{"docker", "1000:1000", "", 2},
	} {
		b := newBackend(c.engine, Options{Host: "unix:///nonexistent"})
		spec := &sandbox.Spec{User: c.user, Security: sandbox.Security{Capabilities: caps}}
		spec.Rootfs.Config.User = c.imageUser
		if got := b.createOptions(spec, "x", nil, false, nil).HostConfig.CapAdd; len(got) != c.want {
			t.Errorf("%s user %q (image %q): CapAdd %v, want %d", c.engine, c.user, c.imageUser, got, c.want)
		}
	}
}
