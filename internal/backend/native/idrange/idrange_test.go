package idrange

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func testAllocator(t *testing.T, subuid string) Allocator {
	t.Helper()
	d := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return Allocator{Dir: filepath.Join(d, "ranges"), Files: Files{
		SubUID: write("subuid", subuid),
		SubGID: write("subgid", "bob:700000:10\n"),
		Passwd: write("passwd", "root:x:0:0::/root:/bin/sh\nbig:x:"+strconv.Itoa(First+3*Size+5)+":100::/:/bin/sh\n"),
		Group:  write("group", "root:x:0:\n"),
	}}
}

// top is the highest block: ephemeral leases are taken from the top of
// the range down, reservations from the bottom up.
const top = End - Size

// TestAcquireAvoidsAndDistinct: blocks overlap no subordinate range or
// high local id, and two live leases never share a block; leases come
// from the top of the range, reservations from the bottom, each side
// skipping what is excluded.
func TestAcquireAvoidsAndDistinct(t *testing.T) {
	// alice's range covers the top block; bob's gid range one id of the
	// third from the top; a local uid the fourth.
	a := testAllocator(t, "# comment\nalice:"+strconv.Itoa(top+10)+":65536\nbroken line\nbob:"+strconv.Itoa(top-2*Size+7)+":1\n")
	if err := os.WriteFile(a.Files.Passwd, []byte("big:x:"+strconv.Itoa(top-3*Size+5)+":100::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var leases []*Lease
	seen := map[uint32]bool{}
	for i := 0; i < 4; i++ {
		l, err := a.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
		if seen[l.Base] {
			t.Fatalf("block %d handed out twice", l.Base)
		}
		seen[l.Base] = true
		if (l.Base-First)%Size != 0 || l.Base < First || l.Base+Size > End {
			t.Fatalf("block %d not aligned in the range", l.Base)
		}
	}
	for _, excluded := range []uint32{top, top - 2*Size, top - 3*Size} {
		if seen[excluded] {
			t.Errorf("excluded block %d handed out", excluded)
		}
	}
	if !seen[top-Size] || !seen[top-4*Size] {
		t.Errorf("leases %v: want the free blocks from the top down", seen)
	}
	// A released block is handed out again.
	freed := leases[0].Base
	leases[0].Release()
	l, err := a.Acquire()
	if err != nil || l.Base != freed {
		t.Fatalf("after release: %+v %v, want %d", l, err, freed)
	}
	l.Release()
	for _, l := range leases[1:] {
		l.Release()
	}
	// Reservations start at the bottom, past what is excluded there.
	b := testAllocator(t, "carol:"+strconv.Itoa(First)+":65536\n")
	base, err := b.Reserve(Reservation{DataDir: "/d", Name: "x"})
	if err != nil || base != First+Size {
		t.Fatalf("reservation: %d %v, want %d", base, err, First+Size)
	}
}

// TestReservation: a reserved block survives its lease, is skipped by
// Acquire, is recognised by Held and Claim, and is free again after Free.
func TestReservation(t *testing.T) {
	a := testAllocator(t, "")
	r := Reservation{DataDir: "/d", Name: "box", UUID: "u1"}
	base, err := a.Reserve(r)
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if l.Base == base {
		t.Fatalf("ephemeral lease got the reserved block %d", base)
	}
	l.Release()
	if ok, err := a.Held(base, r); !ok || err != nil {
		t.Fatalf("Held: %v %v", ok, err)
	}
	other := Reservation{DataDir: "/d", Name: "box", UUID: "u2"}
	if ok, _ := a.Held(base, other); ok {
		t.Fatal("a re-created sandbox holds the old one's block")
	}
	if ok, err := a.Claim(base, other); ok || err != nil {
		t.Fatalf("Claim of another's block: %v %v", ok, err)
	}
	res, err := a.Reservations()
	if err != nil || len(res) != 1 || res[base] != r {
		t.Fatalf("Reservations: %v %v", res, err)
	}
	if err := a.Free(base, other); err != nil {
		t.Fatal(err)
	}
	if ok, _ := a.Held(base, r); !ok {
		t.Fatal("Free by another sandbox removed the reservation")
	}
	if err := a.Free(base, r); err != nil {
		t.Fatal(err)
	}
	if ok, _ := a.Held(base, r); ok {
		t.Fatal("still reserved after Free")
	}
	if ok, err := a.Claim(base, other); !ok || err != nil {
		t.Fatalf("Claim of a free block: %v %v", ok, err)
	}
	if ok, err := a.Claim(First+1, other); ok || err != nil {
		t.Fatalf("Claim of an unaligned block: %v %v", ok, err)
	}
}

// TestCrashReleases: a process that holds a block and is killed frees
// it, with nothing for anyone to clean up.
func TestCrashReleases(t *testing.T) {
	a := testAllocator(t, "")
	if err := os.MkdirAll(a.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// flock(1) from util-linux holds the first block's lock in a child.
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Fatal("flock(1) (util-linux) is needed:", err)
	}
	cmd := exec.Command(flock, a.path(top), "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	defer kill()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := a.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		if l.Base != top {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	kill() // flock(1) and sleep, which shares its descriptor
	_ = cmd.Wait()
	// sleep, reparented, dies a moment later.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l, err := a.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		if l.Base == top {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the block stayed held after its holder was killed (got %d)", l.Base)
		}
	}
}
