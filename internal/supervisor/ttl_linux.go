package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/store"
)

// A sandbox's TTL is kept on time by its own supervisor: Manager.Start
// and Manager.Update write the expiry into the sandbox's directory
// (expires, RFC 3339), the supervisor watches that file (inotify: an
// extension or a TTL given later is seen at once, without polling) and,
// once the time has passed, calls its OnExpire (the CLI's: a detached
// `sandbox expire NAME`, which stops the sandbox and removes it through
// the state store, which the supervisor never opens). A stopped sandbox
// that has expired is removed by the next List or Start, and by GC.

// expiresFile holds the sandbox's expiry while it has one.
const expiresFile = "expires"

// expireRetry is how long the supervisor waits before it asks again
// when the removal it asked for has not happened.
const expireRetry = time.Minute

// ServeOption changes how Serve serves a sandbox.
type ServeOption func(*serveOptions)

type serveOptions struct {
	onExpire func()
	lock     *os.File
}

// WithLock gives Serve the sandbox's supervisor lock as its starter took
// it (spawn: a descriptor of supervisor.lock, flock'ed before this
// process existed), so that no moment passes between the start and the
// lock in which another starter could see no supervisor and start a
// second one. Serve checks that it is the lock of its directory.
func WithLock(f *os.File) ServeOption {
	return func(o *serveOptions) { o.lock = f }
}

// WithExpiry has Serve call onExpire once the sandbox's expiry (the
// expires file in its directory) has passed, again every minute while
// the sandbox still runs, and never while the file says otherwise.
func WithExpiry(onExpire func()) ServeOption {
	return func(o *serveOptions) { o.onExpire = onExpire }
}

// writeExpiry records exp (nil: none) in dir for its supervisor.
func writeExpiry(dir string, exp *time.Time) error {
	p := filepath.Join(dir, expiresFile)
	if exp == nil {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return atomicfile.WriteFile(p, []byte(exp.UTC().Format(time.RFC3339Nano)+"\n"), 0o600)
}

// readExpiry is the expiry recorded in dir (ok false: none, or none
// that can be read).
func readExpiry(dir string) (exp time.Time, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, expiresFile))
	if err != nil || len(b) > 64 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// watchExpiry calls expire once the expiry recorded in dir has passed
// (and every expireRetry after that while it stays passed), re-reading
// it whenever a file of dir changes. It returns the function that stops
// the watch.
func watchExpiry(dir string, expire func()) (stop func(), err error) {
	var asked time.Time
	stop, err = watchDir(dir, unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_DELETE|unix.IN_CREATE, func() time.Duration {
		exp, ok := readExpiry(dir)
		if !ok {
			return -1
		}
		if d := time.Until(exp); d > 0 {
			return d
		}
		// Asked once: again only if the sandbox still runs a while
		// later (the removal failed).
		if asked.IsZero() || time.Since(asked) >= expireRetry {
			expire()
			asked = time.Now()
		}
		return max(expireRetry-time.Since(asked), 0)
	})
	if err != nil {
		return nil, fmt.Errorf("watching the sandbox's expiry: %w", err)
	}
	return stop, nil
}

// expired reports whether sb's expiry has passed.
func expired(sb *store.Sandbox, now time.Time) bool {
	return sb.ExpiresAt != nil && !now.Before(*sb.ExpiresAt)
}

// removeIfExpired removes sb when it is stopped and its expiry has
// passed, and reports whether it did. It takes the sandbox's lock and
// decides on the state read under it.
func (m *Manager) removeIfExpired(ctx context.Context, sb *store.Sandbox) (bool, error) {
	if sb.Status == store.StatusRunning || !expired(sb, time.Now()) {
		return false, nil
	}
	st, err := m.Store(ctx)
	if err != nil {
		return false, err
	}
	unlock, err := m.lock(sb.Name)
	if err != nil {
		return false, err
	}
	defer unlock()
	cur, err := st.Get(ctx, sb.Name)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil // removed meanwhile
	}
	if err != nil {
		return false, err
	}
	if cur.Status == store.StatusRunning || !expired(cur, time.Now()) {
		return false, nil
	}
	err = m.deleteLocked(ctx, st, cur)
	m.expiredGone(cur, err)
	return true, err
}

// expiredGone tells Expired that sb, expired, was removed (or how its
// removal failed).
func (m *Manager) expiredGone(sb *store.Sandbox, err error) {
	if m.Expired != nil && sb.ExpiresAt != nil {
		m.Expired(sb.Name, *sb.ExpiresAt, err)
	}
}

// expiredError is the error of an operation on a sandbox that expired
// and was removed.
func expiredError(sb *store.Sandbox) error {
	return &sandbox.ExpiredError{Name: sb.Name, At: *sb.ExpiresAt}
}
