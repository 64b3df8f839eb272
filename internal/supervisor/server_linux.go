package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Serve boots the sandbox described by spec with its writable layer in
// dir, serves the agent protocol (package agent) on the sandbox's socket
// (dir/sock) itself, writes "ok" (or the error) to ready, and returns
// once the sandbox's PID 1 has exited (stopped, or killed), after
// cleaning up. The sandbox's PID 1 is an idle stub with no privilege
// (native.Instance): every exec, file operation and stop is done from
// here, outside the sandbox.
//
// Serve locks its OS thread for good: PID 1's Pdeathsig follows the
// thread that forked it.
func Serve(ctx context.Context, b *native.Backend, spec *sandbox.Spec, dir string, ready *os.File) error {
	runtime.LockOSThread()
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
	inst, err := b.Start(ctx, spec, dir, os.Stderr)
	if err != nil {
		return fail(err)
	}
	kill := func(err error) error {
		inst.Kill()
		inst.Close()
		_ = os.Remove(sockPath)
		return fail(err)
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
	srv := agent.NewServer(inst)
	defer srv.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(lfd)
	}()
	_ = os.WriteFile(filepath.Join(dir, "activity"), nil, 0o600)
	// Who we are, for a starter that was killed before it could record
	// us (Manager.adopt).
	if st, err := ProcStart(os.Getpid()); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "supervisor.pid"), []byte(fmt.Sprintf("%d %d\n", os.Getpid(), st)), 0o600)
	}
	if ready != nil {
		fmt.Fprint(ready, "ok")
		ready.Close()
	}
	<-inst.Done()
	// No new clients: the socket goes first, then the listener.
	_ = os.Remove(sockPath)
	_ = unix.Shutdown(lfd, unix.SHUT_RDWR)
	<-served
	finish(dir, spec.ID, inst.ExitReason())
	inst.Close()
	return nil
}

// finish cleans up after the init: its socket and cgroup go, and an end
// the sandbox was not asked for (status other than 0) is recorded in
// exit-reason for `sandbox list`.
func finish(dir, id, reason string) {
	_ = os.Remove(filepath.Join(dir, "sock"))
	if id != "" {
		native.RemoveCgroups(id)
	}
	if reason != "" {
		_ = os.WriteFile(filepath.Join(dir, "exit-reason"), []byte(reason), 0o600)
	}
}
