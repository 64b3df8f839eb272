package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/idletrim"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Serve boots the sandbox described by spec with its writable layer in
// dir, writes "ok" (or the error) to ready and closes it, then serves
// clients on dir/sock until the sandbox stops.
func Serve(ctx context.Context, b *native.Backend, spec *sandbox.Spec, dir string, ready *os.File) error {
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
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		inst.Kill()
		inst.Close()
		return fail(err)
	}
	old := unix.Umask(0o177)
	err = unix.Bind(lfd, &unix.SockaddrUnix{Name: sockPath})
	unix.Umask(old)
	if err == nil {
		err = unix.Listen(lfd, 128)
	}
	if err != nil {
		unix.Close(lfd)
		inst.Kill()
		inst.Close()
		return fail(fmt.Errorf("listening on %s: %w", sockPath, err))
	}
	_ = os.WriteFile(filepath.Join(dir, "activity"), nil, 0o600)
	// Who we are, for a starter that was killed before it could record
	// us (Manager.adopt).
	if st, err := ProcStart(os.Getpid()); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "supervisor.pid"), []byte(fmt.Sprintf("%d %d\n", os.Getpid(), st)), 0o600)
	}
	s := &server{inst: inst, dir: dir, pending: map[uint64]chan agent.Response{}, stopped: make(chan struct{}),
		trim: idletrim.New(idleTrimAfter)}
	defer s.trim.Stop()
	go s.readAgent()
	if ready != nil {
		fmt.Fprint(ready, "ok")
		ready.Close()
	}
	go func() {
		for {
			nfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
			if err != nil {
				if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
					continue
				}
				return
			}
			go s.serveClient(agent.NewConn(os.NewFile(uintptr(nfd), "client")))
		}
	}()
	<-inst.Done()
	_ = os.Remove(sockPath)
	unix.Close(lfd)
	if reason := inst.ExitReason(); reason != "" && !s.stopRequested() {
		_ = os.WriteFile(filepath.Join(dir, "exit-reason"), []byte(reason), 0o600)
	}
	inst.Close()
	close(s.stopped)
	// Let the stop reply go out.
	time.Sleep(20 * time.Millisecond)
	return nil
}

type server struct {
	inst *native.Instance
	dir  string

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]chan agent.Response
	stopping bool
	stopped  chan struct{}

	// trim gives memory back while no request is being handled.
	trim *idletrim.Trimmer
}

// idleTrimAfter is how long a supervisor waits without a request before
// it trims its resident memory (package idletrim).
const idleTrimAfter = 10 * time.Second

func (s *server) stopRequested() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// readAgent dispatches the agent's responses to the waiting requests.
func (s *server) readAgent() {
	for {
		var resp agent.Response
		fds, err := s.inst.Conn().Recv(&resp)
		agent.CloseFds(fds)
		if err != nil {
			s.mu.Lock()
			for id, ch := range s.pending {
				ch <- agent.Response{ID: id, Error: "the sandbox stopped", Kind: "setup"}
				delete(s.pending, id)
			}
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		ch := s.pending[resp.ID]
		if ch != nil && (resp.Exited || resp.Error != "" || !resp.Started) {
			delete(s.pending, resp.ID)
		}
		s.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
}

// forward sends req to the agent under a fresh ID and returns the
// channel its responses arrive on.
func (s *server) forward(req agent.Request, fds []int) (uint64, chan agent.Response, error) {
	ch := make(chan agent.Response, 4)
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.pending[id] = ch
	s.mu.Unlock()
	req.ID = id
	if err := s.inst.Conn().Send(req, fds...); err != nil {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
		return 0, nil, err
	}
	return id, ch, nil
}

func (s *server) serveClient(c *agent.Conn) {
	defer c.Close()
	var mu sync.Mutex
	execs := map[uint64]uint64{} // client's exec ID → agent's
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var req agent.Request
		fds, err := c.Recv(&req)
		if err != nil {
			return
		}
		// Busy until the request's first answer: a long command keeps
		// the sandbox working, not its supervisor.
		idle := s.trim.Busy()
		clientID := req.ID
		switch req.Op {
		case agent.OpStop:
			agent.CloseFds(fds)
			idle()
			wg.Add(1)
			go func() { defer wg.Done(); s.stop(c, clientID) }()
			continue
		case agent.OpStats:
			agent.CloseFds(fds)
			st := s.inst.Stats()
			st.UpperBytes = dirSize(filepath.Join(s.dir, "upper"))
			_ = c.Send(agent.Response{ID: clientID, Stats: &st})
			idle()
			continue
		case agent.OpSignal:
			mu.Lock()
			req.Target = execs[req.Target]
			mu.Unlock()
		}
		id, ch, err := s.forward(req, fds)
		agent.CloseFds(fds)
		if err != nil {
			_ = c.Send(agent.Response{ID: clientID, Error: "the sandbox is not running: " + err.Error(), Kind: "setup"})
			idle()
			continue
		}
		if req.Op == agent.OpExec {
			now := time.Now()
			_ = os.Chtimes(filepath.Join(s.dir, "activity"), now, now)
			mu.Lock()
			execs[clientID] = id
			mu.Unlock()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer idle()
			for resp := range ch {
				resp.ID = clientID
				_ = c.Send(resp)
				idle()
				if resp.Exited || resp.Error != "" || !resp.Started {
					mu.Lock()
					delete(execs, clientID)
					mu.Unlock()
					return
				}
			}
		}()
	}
}

// stop asks the agent to stop the sandbox, kills it if it takes too
// long, and answers once the init is gone.
func (s *server) stop(c *agent.Conn, id uint64) {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	_, _, _ = s.forward(agent.Request{Op: agent.OpStop}, nil)
	select {
	case <-s.inst.Done():
	case <-time.After(10 * time.Second):
		s.inst.Kill()
		<-s.inst.Done()
	}
	<-s.stopped
	_ = c.Send(agent.Response{ID: id, Exited: true})
}

// dirSize is the disk usage of dir in bytes (best effort).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
