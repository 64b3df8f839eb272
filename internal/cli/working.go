package cli

import (
	"fmt"
	"time"
)

// workingAfter is how long an operation runs before working says so.
const workingAfter = time.Second

// working tells the user, on stderr, that a long operation (what, e.g.
// "taking snapshot s1 of dev") is under way once it has taken longer
// than workingAfter: on a terminal one line that counts the seconds,
// otherwise one line when it starts to be long and one when it ends.
// Quick operations print nothing. Call the returned function when the
// operation has ended.
func (a *App) working(what string) (done func()) {
	if a.Quiet {
		return func() {}
	}
	stop := make(chan struct{})
	ended := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(ended)
		t := time.NewTimer(workingAfter)
		defer t.Stop()
		select {
		case <-stop:
			return
		case <-t.C:
		}
		tty := isTerminal(a.Stderr)
		if !tty {
			fmt.Fprintf(a.Stderr, "agentkernel: %s...\n", what)
			<-stop
			fmt.Fprintf(a.Stderr, "agentkernel: %s: ended after %.1fs\n", what, time.Since(start).Seconds())
			return
		}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			fmt.Fprintf(a.Stderr, "\ragentkernel: %s... %ds", what, int(time.Since(start).Seconds()))
			select {
			case <-stop:
				fmt.Fprintf(a.Stderr, "\ragentkernel: %s: ended after %.1fs\n", what, time.Since(start).Seconds())
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(stop)
		<-ended
	}
}
