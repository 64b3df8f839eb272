package supervisor

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// watchDir calls look at once, again whenever an entry of dir changes
// (inotify events in mask), and again after the time look returned when
// that is not negative. It returns the function that stops the watch;
// look is not called after it returned.
func watchDir(dir string, mask uint32, look func() time.Duration) (stop func(), err error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Non-blocking: the runtime's poller waits for the events.
	f := os.NewFile(uintptr(fd), "inotify")
	changed := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil {
				close(changed)
				return
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		for {
			t.Stop()
			var wake <-chan time.Time
			if d := look(); d >= 0 {
				t.Reset(d)
				wake = t.C
			}
			select {
			case <-quit:
				return
			case _, ok := <-changed:
				if !ok {
					return // the watch failed
				}
			case <-wake:
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
		f.Close()
	}, nil
}
