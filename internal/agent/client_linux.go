package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Client is a client's connection to a sandbox's agent (Server): the
// calls of the protocol, as a Go API. It is safe for concurrent use.
// Every face uses it, the agentkernel binary's exec, cp, attach and stats
// included (package sandboxdir finds the socket), so it links nothing but
// this package and the standard library's.
type Client struct {
	conn *Conn

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan Response
	err     error
}

// Dial connects to the agent's socket at path (a persistent sandbox's
// is sandboxes/NAME/sock under the data directory).
func Dial(path string) (*Client, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	// Connected blocking (a full backlog waits rather than failing),
	// then non-blocking: the file joins the runtime's poller, so the
	// read loop waits there instead of holding a thread in recvmsg (and
	// making the runtime start another for the caller).
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	c := &Client{conn: NewConn(os.NewFile(uintptr(fd), "agent")), pending: map[uint64]chan Response{}}
	go c.read()
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) read() {
	for {
		var resp Response
		fds, err := c.conn.Recv(&resp)
		CloseFds(fds)
		c.mu.Lock()
		if err != nil {
			c.err = err
			for id, ch := range c.pending {
				ch <- Response{ID: id, Error: "connection to the supervisor lost", Kind: KindSetup}
				delete(c.pending, id)
			}
			c.mu.Unlock()
			return
		}
		ch := c.pending[resp.ID]
		if ch != nil && !resp.Started {
			delete(c.pending, resp.ID)
		}
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
}

// send sends req and returns its ID and response channel.
func (c *Client) send(req Request, fds ...int) (uint64, chan Response, error) {
	ch := make(chan Response, 2)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return 0, nil, c.err
	}
	c.next++
	req.ID = c.next
	c.pending[req.ID] = ch
	c.mu.Unlock()
	if err := c.conn.Send(req, fds...); err != nil {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return 0, nil, err
	}
	return req.ID, ch, nil
}

// Call sends req with fds and waits for its one response. A response
// with an error becomes a *RequestError.
func (c *Client) Call(ctx context.Context, req Request, fds ...int) (Response, error) {
	_, ch, err := c.send(req, fds...)
	if err != nil {
		return Response{}, err
	}
	select {
	case resp := <-ch:
		if resp.Error != "" {
			return resp, &RequestError{Resp: resp}
		}
		return resp, nil
	case <-ctx.Done():
		return Response{}, ctx.Err()
	}
}

// RequestError is a failed request as the agent reported it.
type RequestError struct{ Resp Response }

func (e *RequestError) Error() string { return e.Resp.Error }

// Errno is the error number the agent reported, if any.
func (e *RequestError) Errno() syscall.Errno { return syscall.Errno(e.Resp.Errno) }

// Refused reports whether the path was refused (not merely missing).
func (e *RequestError) Refused() bool { return e.Resp.Kind == KindRefused }

// Exec runs req in the sandbox with stdin, stdout and stderr as its
// descriptors and returns its wait status. Signals received on sigs are
// forwarded to the command. A failure to start is an *ExecError
// (ResponseError), wrapped with sandbox.ErrNotFound or
// sandbox.ErrCannotInvoke where the command could not be executed.
func (c *Client) Exec(ctx context.Context, req ExecRequest, stdin, stdout, stderr *os.File, sigs <-chan os.Signal) (syscall.WaitStatus, error) {
	resp, err := c.ExecEnd(ctx, req, stdin, stdout, stderr, sigs)
	return syscall.WaitStatus(resp.Status), err
}

// ExecEnd is Exec, answering with the server's Exited response: the wait
// status and what the memory limit killed meanwhile (OOMKills).
func (c *Client) ExecEnd(ctx context.Context, req ExecRequest, stdin, stdout, stderr *os.File, sigs <-chan os.Signal) (Response, error) {
	id, ch, err := c.send(Request{Op: OpExec, Exec: &req}, int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	if err != nil {
		return Response{}, err
	}
	for {
		select {
		case resp := <-ch:
			switch {
			case resp.Error != "":
				return Response{}, ResponseError(&resp)
			case resp.Exited:
				return resp, nil
			}
		case sig := <-sigs:
			if s, ok := sig.(syscall.Signal); ok {
				_, _, _ = c.send(Request{Op: OpSignal, Target: id, Signal: int(s)})
			}
		case <-ctx.Done():
			// Killed, and waited for (a while), so that its output is
			// in and it is gone when the caller reports it.
			_, _, _ = c.send(Request{Op: OpSignal, Target: id, Signal: int(syscall.SIGKILL)})
			t := time.NewTimer(killWait)
			defer t.Stop()
			for {
				select {
				case resp := <-ch:
					if resp.Exited || resp.Error != "" {
						return resp, ctx.Err()
					}
				case <-t.C:
					return Response{}, ctx.Err()
				}
			}
		}
	}
}

// killWait bounds how long Exec waits for a command it killed.
const killWait = 5 * time.Second

// stream runs a request that reads (toAgent) or writes a pipe while
// data is copied from r or to w.
func (c *Client) stream(ctx context.Context, req Request, r io.Reader, w io.Writer) (Response, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return Response{}, err
	}
	var theirs *os.File
	copied := make(chan error, 1)
	if r != nil {
		theirs = pr
		go func() { _, err := io.Copy(pw, r); pw.Close(); copied <- err }()
	} else {
		theirs = pw
		go func() { _, err := io.Copy(w, pr); pr.Close(); copied <- err }()
	}
	resp, err := c.Call(ctx, req, int(theirs.Fd()))
	theirs.Close()
	if err != nil {
		// Unblock the copier.
		if r != nil {
			pw.Close()
		} else {
			pr.Close()
		}
		<-copied
		return resp, err
	}
	if cerr := <-copied; cerr != nil && r == nil {
		return resp, cerr
	}
	return resp, nil
}

// ReadFile copies the sandbox's file p to w.
func (c *Client) ReadFile(ctx context.Context, p string, w io.Writer) (int64, error) {
	resp, err := c.stream(ctx, Request{Op: OpRead, Path: p}, nil, w)
	return resp.Size, err
}

// WriteFile creates or replaces the sandbox's file p (parents created)
// with what r holds.
func (c *Client) WriteFile(ctx context.Context, p string, r io.Reader, mode uint32) (int64, error) {
	resp, err := c.stream(ctx, Request{Op: OpWrite, Path: p, Mode: mode}, r, nil)
	return resp.Size, err
}

// TarOut writes a tar stream of p to w.
func (c *Client) TarOut(ctx context.Context, p string, w io.Writer) error {
	_, err := c.stream(ctx, Request{Op: OpTarOut, Path: p}, nil, w)
	return err
}

// TarIn extracts the tar stream r into the directory p.
func (c *Client) TarIn(ctx context.Context, p string, r io.Reader) error {
	_, err := c.stream(ctx, Request{Op: OpTarIn, Path: p}, r, nil)
	return err
}

// Delete removes p.
func (c *Client) Delete(ctx context.Context, p string, recursive bool) error {
	_, err := c.Call(ctx, Request{Op: OpDelete, Path: p, Recursive: recursive})
	return err
}

// List lists directory p.
func (c *Client) List(ctx context.Context, p string) ([]Entry, error) {
	resp, err := c.Call(ctx, Request{Op: OpList, Path: p})
	return resp.Entries, err
}

// Stat describes p.
func (c *Client) Stat(ctx context.Context, p string) (Entry, error) {
	resp, err := c.Call(ctx, Request{Op: OpStat, Path: p})
	if resp.Stat == nil {
		return Entry{}, err
	}
	return *resp.Stat, err
}

// Stats reports the sandbox's resource usage.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	resp, err := c.Call(ctx, Request{Op: OpStats})
	if err != nil || resp.Stats == nil {
		return Stats{}, errors.Join(err, errors.New("no stats"))
	}
	return *resp.Stats, nil
}

// Stop stops the sandbox and waits until it is gone.
func (c *Client) Stop(ctx context.Context) error {
	_, err := c.Call(ctx, Request{Op: OpStop})
	if err != nil && c.err != nil {
		return nil // the supervisor exited: stopped
	}
	if err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}

// ExecDetached starts req as a detached command of the server.
func (c *Client) ExecDetached(ctx context.Context, req ExecRequest) (sandbox.DetachedCommand, error) {
	resp, err := c.Call(ctx, Request{Op: OpDetach, Exec: &req})
	if err != nil {
		var re *RequestError
		if errors.As(err, &re) {
			if re.Resp.Kind == KindLimit {
				return sandbox.DetachedCommand{}, detachedErr("", err)
			}
			return sandbox.DetachedCommand{}, ResponseError(&re.Resp)
		}
		return sandbox.DetachedCommand{}, err
	}
	if len(resp.Detached) != 1 {
		return sandbox.DetachedCommand{}, errors.New("detach: no command in the answer")
	}
	return resp.Detached[0], nil
}

// detachedErr maps the server's answers about detached commands to
// package sandbox's errors.
func detachedErr(id string, err error) error {
	var re *RequestError
	if errors.As(err, &re) {
		switch re.Resp.Kind {
		case KindNotFound:
			return fmt.Errorf("%s: %w", id, sandbox.ErrDetachedNotFound)
		case KindRange:
			return fmt.Errorf("%s: %w", re.Resp.Error, sandbox.ErrLogOffset)
		case KindLimit:
			return fmt.Errorf("%s: %w", re.Resp.Error, sandbox.ErrDetachedLimit)
		}
	}
	return err
}

// Detached lists the detached commands (id "") or describes one.
func (c *Client) Detached(ctx context.Context, id string) ([]sandbox.DetachedCommand, error) {
	resp, err := c.Call(ctx, Request{Op: OpDetached, CmdID: id})
	if err != nil {
		return nil, detachedErr(id, err)
	}
	return resp.Detached, nil
}

// DetachedLogs copies stream of detached command id from offset to w.
func (c *Client) DetachedLogs(ctx context.Context, id, stream string, offset int64, w io.Writer) (int64, error) {
	resp, err := c.stream(ctx, Request{Op: OpDetachedLogs, CmdID: id, Stream: stream, Offset: offset}, nil, w)
	if err != nil {
		return 0, detachedErr(id, err)
	}
	return resp.Size, nil
}

// KillDetached kills detached command id and returns it once ended.
func (c *Client) KillDetached(ctx context.Context, id string) (sandbox.DetachedCommand, error) {
	resp, err := c.Call(ctx, Request{Op: OpDetachedKill, CmdID: id})
	if err != nil {
		return sandbox.DetachedCommand{}, detachedErr(id, err)
	}
	if len(resp.Detached) != 1 {
		return sandbox.DetachedCommand{}, errors.New("kill: no command in the answer")
	}
	return resp.Detached[0], nil
}
