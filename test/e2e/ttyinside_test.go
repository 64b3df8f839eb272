package e2e

import "testing"

// TestTTYInsideSandbox: exec -t and attach give the command a terminal
// from the sandbox's own devpts: tty names a /dev/pts/N that exists
// inside (a pty from the host's devpts made tty say "not a tty").
func TestTTYInsideSandbox(t *testing.T) {
	a, _ := newSandbox(t, "ttyin")
	const check = `t=$(tty) && test -c "$t" && echo "TTY-$((1+1))-OK:$t"`
	c, _, r := ptyRun(t, a, 24, 80, "exec", "-t", "ttyin", "--", "sh", "-c", check)
	expect(t, r, "TTY-2-OK:/dev/pts/")
	if code := exitCode(t, c); code != 0 {
		t.Errorf("exec -t exit: %d", code)
	}

	c, master, r := ptyRun(t, a, 24, 80, "attach", "ttyin")
	master.Write([]byte(check + "; exit 5\r"))
	expect(t, r, "TTY-2-OK:/dev/pts/")
	if code := exitCode(t, c); code != 5 {
		t.Errorf("attach exit: %d", code)
	}
}
