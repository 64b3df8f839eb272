package supervisor

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// expiryWatch watches dir's expiry and reports each call on the channel.
func expiryWatch(t *testing.T, dir string) <-chan time.Time {
	t.Helper()
	calls := make(chan time.Time, 8)
	stop, err := watchExpiry(dir, func() { calls <- time.Now() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return calls
}

func at(d time.Duration) *time.Time {
	t := time.Now().Add(d)
	return &t
}

func TestWatchExpiryOnTime(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	if err := writeExpiry(dir, at(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	calls := expiryWatch(t, dir)
	select {
	case c := <-calls:
		if c.Sub(start) < 300*time.Millisecond {
			t.Errorf("called %v after start, before the expiry", c.Sub(start))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not called after the expiry")
	}
}

// An extension written while the supervisor waits moves its timer; a
// removed expiry (none) cancels it; one given later is kept.
func TestWatchExpiryFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := writeExpiry(dir, at(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	calls := expiryWatch(t, dir)
	time.Sleep(50 * time.Millisecond)
	extended := at(800 * time.Millisecond)
	if err := writeExpiry(dir, extended); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-calls:
		if c.Before(*extended) {
			t.Fatalf("called %v before the extended expiry", extended.Sub(c))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not called after the extended expiry")
	}

	dir2 := t.TempDir()
	if err := writeExpiry(dir2, at(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	calls2 := expiryWatch(t, dir2)
	if err := writeExpiry(dir2, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir2, expiresFile)); !os.IsNotExist(err) {
		t.Fatalf("expiry file left: %v", err)
	}
	select {
	case <-calls2:
		t.Fatal("called although the expiry was removed")
	case <-time.After(600 * time.Millisecond):
	}
	// An expiry that has passed, given later: at once.
	given := time.Now()
	if err := writeExpiry(dir2, at(-time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-calls2:
		if c.Sub(given) > 2*time.Second {
			t.Errorf("called %v after the file said so", c.Sub(given))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an expiry given later was not seen")
	}
}

// A file that is not an expiry counts as none.
func TestReadExpiryRefusesJunk(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []string{"", "tomorrow", "2026-01-01", string(make([]byte, 100))} {
		if err := os.WriteFile(filepath.Join(dir, expiresFile), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if exp, ok := readExpiry(dir); ok {
			t.Errorf("readExpiry(%q) = %v", s, exp)
		}
	}
	want := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	if err := writeExpiry(dir, &want); err != nil {
		t.Fatal(err)
	}
	if exp, ok := readExpiry(dir); !ok || !exp.Equal(want) {
		t.Errorf("readExpiry = %v %v, want %v", exp, ok, want)
	}
}
