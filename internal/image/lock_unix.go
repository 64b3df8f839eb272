//go:build unix

package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// flock takes an exclusive (or shared) flock(2) on path, creating the
// file, and waits for it while ctx allows. flock locks belong to the open
// file description, so two Stores in one process exclude each other just
// as two processes do. The returned function releases the lock.
func flock(ctx context.Context, path string, shared bool) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	how := unix.LOCK_EX
	if shared {
		how = unix.LOCK_SH
	}
	delay := 2 * time.Millisecond
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil {
			return func() {
				_ = unix.Flock(fd, unix.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}
