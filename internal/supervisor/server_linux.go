package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Serve boots the sandbox described by spec with its writable layer in
// dir, hands the sandbox's socket (dir/sock) to its init, which serves
// clients itself from then on, writes "ok" (or the error) to ready, and
// waits for the init to end. Where the exec stub exists it waits as the
// stub (native.ExecWaiter): this process then holds a few KiB instead
// of a Go runtime, and runs reap (its argv, plus the init's pid) once
// the init exited; elsewhere it waits here. Either way Reap cleans up.
//
// Serve locks its OS thread for good: the init's Pdeathsig follows the
// thread that forked it, which must be the one that execs the stub.
func Serve(ctx context.Context, b *native.Backend, spec *sandbox.Spec, dir string, ready *os.File, reap []string) error {
	runtime.LockOSThread()
	waiter := native.ReserveWaiterFds(ready)
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
	if err := handOver(inst, lfd); err != nil {
		return kill(fmt.Errorf("handing the socket to the sandbox: %w", err))
	}
	_ = os.WriteFile(filepath.Join(dir, "activity"), nil, 0o600)
	// Who we are, for a starter that was killed before it could record
	// us (Manager.adopt). The pid and start time stay ours as the stub.
	if st, err := ProcStart(os.Getpid()); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "supervisor.pid"), []byte(fmt.Sprintf("%d %d\n", os.Getpid(), st)), 0o600)
	}
	if ready != nil {
		fmt.Fprint(ready, "ok")
	}
	// AGENTKERNEL_SUPERVISOR_NO_STUB=1 keeps the Go supervisor waiting
	// (the path of architectures without the stub; tests use it).
	select {
	case <-inst.Done():
		// Already over (its status is collected here): no stub.
		waiter = false
	default:
	}
	if waiter && reap != nil && os.Getenv("AGENTKERNEL_SUPERVISOR_NO_STUB") != "1" {
		// Replaces fd 3 (ready: the starter sees its end) and returns
		// only when this process cannot become the stub.
		err := native.ExecWaiter(inst.Pid(), append(slices.Clone(reap), strconv.Itoa(inst.Pid())), os.Environ())
		if !errors.Is(err, sandbox.ErrUnsupported) {
			fmt.Fprintf(os.Stderr, "agentkernel supervisor: %v; waiting as a Go process\n", err)
		}
	}
	if ready != nil {
		ready.Close()
	}
	<-inst.Done()
	finish(dir, spec.ID, inst.ExitReason())
	inst.Close()
	return nil
}

// handOver sends the init the listening socket (agent.OpServe) and
// waits for its answer. Nothing else of the host goes in: the init runs
// in the sandbox's namespaces, and a descriptor of a host directory
// there would be one step from the host's files.
func handOver(inst *native.Instance, lfd int) error {
	if err := inst.Conn().Send(agent.Request{ID: 1, Op: agent.OpServe}, lfd); err != nil {
		return err
	}
	var resp agent.Response
	fds, err := inst.Conn().Recv(&resp)
	agent.CloseFds(fds)
	if err != nil {
		return err
	}
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	return nil
}

// Reap is the end of a waiting supervisor (`sandbox reap NAME PID`, run
// by the stub once the init exited): it collects the init's status and
// cleans up after it.
func Reap(dir string, pid int) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("waiting for the sandbox init (pid %d): %w", pid, err)
		}
		break
	}
	var spec sandbox.Spec
	if b, err := os.ReadFile(filepath.Join(dir, "spec.json")); err == nil {
		_ = json.Unmarshal(b, &spec)
	}
	finish(dir, spec.ID, native.ExitReason(syscall.WaitStatus(ws), nil))
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
