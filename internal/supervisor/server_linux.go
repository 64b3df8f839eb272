package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Serve boots the sandbox described by spec with its writable layer in
// dir through b (the backend the face wired in: native's Backend, whose
// sandbox's PID 1 is an idle stub with no privilege), serves the agent
// protocol (package agent) on the sandbox's socket (dir/sock) itself,
// writes "ok" (or the error) to ready, and returns once the sandbox has
// ended (stopped, or killed), after cleaning up. Every exec, file
// operation and stop is done from here, outside the sandbox: the
// Instance b returns must be an agent.Sandbox, which agent.Server
// serves.
//
// With WithExpiry, Serve keeps the sandbox's expiry (ttl_linux.go).
//
// Serve locks its OS thread for good: a backend may tie the sandbox's
// life to the thread that booted it (native: PID 1's Pdeathsig follows
// the thread that forked it).
func Serve(ctx context.Context, b sandbox.Booter, spec *sandbox.Spec, dir string, ready *os.File, opts ...ServeOption) error {
	runtime.LockOSThread()
	var o serveOptions
	for _, opt := range opts {
		opt(&o)
	}
	sockPath := filepath.Join(dir, "sock")
	_ = os.Remove(sockPath)
	_ = os.Remove(filepath.Join(dir, "exit-reason"))
	fail := func(err error) error {
		if ready != nil {
			fmt.Fprintf(ready, "error: %v", err)
			ready.Close()
		}
		return err
	}
	// Held from before the boot to the end: a starter killed while this
	// supervisor boots leaves the next start something to wait for
	// (Manager.adoptBooting) rather than a second supervisor to race.
	unlockSup, err := takeLock(filepath.Join(dir, supervisorLockFile), o.lock)
	if err != nil {
		return fail(err)
	}
	defer unlockSup()
	inst, err := b.Boot(ctx, spec, dir, os.Stderr)
	if err != nil {
		return fail(err)
	}
	kill := func(err error) error {
		inst.Kill()
		inst.Close()
		_ = os.Remove(sockPath)
		return fail(err)
	}
	served, ok := inst.(agent.Sandbox)
	if !ok {
		return kill(fmt.Errorf("the backend's sandbox cannot be served by the agent here: %w", sandbox.ErrUnsupported))
	}
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return kill(err)
	}
	defer unix.Close(lfd)
	old := unix.Umask(0o177)
	err = unix.Bind(lfd, &unix.SockaddrUnix{Name: sockPath})
	unix.Umask(old)
	if err == nil {
		err = unix.Listen(lfd, 128)
	}
	if err != nil {
		return kill(fmt.Errorf("listening on %s: %w", sockPath, err))
	}
	srv := agent.NewServer(served)
	defer srv.Close()
	wireExec(srv, dir)
	serving := make(chan struct{})
	go func() {
		defer close(serving)
		srv.Serve(lfd)
	}()
	_ = os.WriteFile(filepath.Join(dir, "activity"), nil, 0o600)
	if p, ok := inst.(interface{ NetworkProxied() bool }); ok && p.NetworkProxied() {
		_ = os.WriteFile(filepath.Join(dir, netProxyFile), nil, 0o600)
	} else {
		_ = os.Remove(filepath.Join(dir, netProxyFile))
	}
	// Who we are, for a starter that was killed before it could record
	// us (Manager.adopt).
	if st, err := ProcStart(os.Getpid()); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "supervisor.pid"), []byte(fmt.Sprintf("%d %d\n", os.Getpid(), st)), 0o600)
	}
	if fz, ok := b.(sandbox.Freezer); ok && spec.ID != "" {
		stop, err := guardFreeze(fz, spec.ID, dir)
		if err != nil {
			return kill(err)
		}
		defer stop()
	}
	if o.onExpire != nil {
		stop, err := watchExpiry(dir, o.onExpire)
		if err != nil {
			return kill(err)
		}
		defer stop()
	}
	// SSH last: nothing after it can fail the start; its connections
	// end before the instance is closed.
	stopSSH := func() {}
	if spec.SSH != nil {
		if stopSSH, err = startSSH(spec, dir, inst, served); err != nil {
			return kill(err)
		}
	}
	if ready != nil {
		fmt.Fprint(ready, "ok")
		ready.Close()
	}
	<-inst.Done()
	stopSSH()
	// No new clients: the socket goes first, then the listener.
	_ = os.Remove(sockPath)
	_ = unix.Shutdown(lfd, unix.SHUT_RDWR)
	<-serving
	finish(dir, inst.ExitReason())
	inst.Close() // the sandbox's cgroup goes with it
	return nil
}

// finish cleans up after the sandbox: its socket goes, and an end the
// sandbox was not asked for is recorded in exit-reason for
// `sandbox list`.
func finish(dir, reason string) {
	_ = os.Remove(filepath.Join(dir, "sock"))
	if reason != "" {
		_ = os.WriteFile(filepath.Join(dir, "exit-reason"), []byte(reason), 0o600)
	}
}
