//go:build linux

package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestTTYInsideSandbox: run -t, exec -t and attach give the command a
// terminal from the sandbox's own devpts: tty names a /dev/pts/N that
// exists inside (a pty from the host's devpts made tty say "not a tty"),
// sized like the caller's.
func TestTTYInsideSandbox(t *testing.T) {
	a, _ := newSandbox(t, "ttyin")
	const check = `t=$(tty) && test -c "$t" && echo "TTY-$((1+1))-OK:$t"`
	c, _, r := ptyRun(t, a, 24, 80, "exec", "-t", "ttyin", "--", "sh", "-c", check)
	expect(t, r, "TTY-2-OK:/dev/pts/")
	if code := exitCode(t, c); code != 0 {
		t.Errorf("exec -t exit: %d", code)
	}

	// run -t as root: the sandbox is built on a thread, which opens the
	// terminal in the sandbox's devpts once the root is in place.
	c, _, r = ptyRun(t, a, 31, 97, "run", "-t", "--image", "host", "--", "sh", "-c", check+`; stty size; exit 3`)
	expect(t, r, "TTY-2-OK:/dev/pts/")
	expect(t, r, "31 97")
	if code := exitCode(t, c); code != 3 {
		t.Errorf("run -t exit: %d", code)
	}

	c, master, r := ptyRun(t, a, 24, 80, "attach", "ttyin")
	master.Write([]byte(check + "; exit 5\r"))
	expect(t, r, "TTY-2-OK:/dev/pts/")
	if code := exitCode(t, c); code != 5 {
		t.Errorf("attach exit: %d", code)
	}
}

// TestPTYSwapAttack: exec -t opens the sandbox's /dev/pts/ptmx from the
// host side. The sandbox's root, from inside, tries every way to put
// something else there first (remove, rename or unmount devpts, mount
// over it, add a second multiplexer node); each must fail, and exec -t
// must still give a terminal of the sandbox's devpts. Should one
// succeed, the host side refuses what is not a devpts multiplexer
// (devptsPeer), which the native package's tests cover.
func TestPTYSwapAttack(t *testing.T) {
	a, _ := newSandbox(t, "ptyswap")
	const attempts = `
for try in "rm -f /dev/pts/ptmx" "mv /dev/pts/ptmx /dev/pts/x" "mv /dev/pts /dev/pts.old" "umount /dev/pts" "umount -l /dev/pts" \
    "mount -t tmpfs none /dev/pts" "mount --bind /tmp /dev/pts" "mknod /dev/pts/evil c 5 2" "ln -s /tmp/x /dev/pts/evil"; do
  if sh -c "$try" 2>/dev/null; then echo "SWAPPED: $try"; fi
done
echo ATTEMPTS-DONE`
	r := a.must("exec", "ptyswap", "--", "sh", "-c", attempts)
	if !strings.Contains(r.stdout, "ATTEMPTS-DONE") || strings.Contains(r.stdout, "SWAPPED") {
		t.Fatalf("the sandbox changed its devpts: %v", r)
	}
	const check = `t=$(tty) && test -c "$t" && echo "TTY-$((1+1))-OK:$t"`
	c, _, rd := ptyRun(t, a, 24, 80, "exec", "-t", "ptyswap", "--", "sh", "-c", check)
	expect(t, rd, "TTY-2-OK:/dev/pts/")
	if code := exitCode(t, c); code != 0 {
		t.Errorf("exec -t exit: %d", code)
	}
}

// TestRootlessRunTTY: run -t as an unprivileged user (the re-executed
// init builds the sandbox) gives the command a terminal from the
// sandbox's own devpts too: tty names a /dev/pts/N that exists inside
// (a pty of the host's devpts made that test fail), sized like the
// caller's, and the command's exit code comes back.
func TestRootlessRunTTY(t *testing.T) {
	a, _ := rootlessAK(t)
	const check = `t=$(tty) && test -c "$t" && echo "TTY-$((1+1))-OK:$t"`
	c, _, r := ptyRun(t, a, 29, 83, "run", "-t", "--image", "host", "--", "sh", "-c", check+`; stty size; exit 3`)
	expect(t, r, "TTY-2-OK:/dev/pts/")
	expect(t, r, "29 83")
	if code := exitCode(t, c); code != 3 {
		t.Errorf("run -t exit: %d", code)
	}
}

// TestTTYPipedStdinEnds: run -t and exec -t whose stdin is a pipe, not a
// terminal, pass the pipe's end on as the terminal's (^D), so that a
// command reading its terminal ends, with or without a last newline.
func TestTTYPipedStdinEnds(t *testing.T) {
	a, _ := newSandbox(t, "ttypipe")
	for _, c := range []struct {
		in   string
		args []string
		want string
	}{
		{"one\ntwo\n", []string{"run", "-t", "--image", "host", "--", "sh", "-c", "wc -l; exit 4"}, "2"},
		{"no newline", []string{"run", "-t", "--image", "host", "--", "sh", "-c", "cat; echo; echo END; exit 4"}, "no newlineno newline\r\nEND"},
		{"one\ntwo\n", []string{"exec", "-t", "ttypipe", "--", "sh", "-c", "wc -l; exit 4"}, "2"},
		{"no newline", []string{"exec", "-t", "ttypipe", "--", "sh", "-c", "cat; echo; echo END; exit 4"}, "no newlineno newline\r\nEND"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := a.cmd(ctx, c.args...)
		cmd.Stdin = strings.NewReader(c.in)
		out, err := cmd.Output()
		cancel()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 4 || !strings.Contains(string(out), c.want) {
			t.Errorf("%q | agentkernel %v: exit %d (%v), output %q, want %q in it", c.in, c.args, code, err, out, c.want)
		}
	}
}
