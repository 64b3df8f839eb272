package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	// A command name with spaces and parentheses: fields count from the
	// last ')'.
	line := "42 (evil) 1 2 (x) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1000 0 0\n"
	got, err := statCPU(line)
	if err != nil || got != 325 {
		t.Fatalf("statCPU = %d, %v; want 325", got, err)
	}
	for _, bad := range []string{"", "42 (x", "42 (x) S 1 2", "42 (x) S 1 42 42 0 -1 0 0 0 0 0 u s"} {
		if _, err := statCPU(bad); err == nil {
			t.Errorf("statCPU(%q) accepted", bad)
		}
	}
}

func TestIperfBitsPerSecond(t *testing.T) {
	ok := `{"start":{},"end":{"sum_sent":{"bits_per_second":2e9},"sum_received":{"bits_per_second":1.5e9}}}`
	if v, err := iperfBitsPerSecond([]byte(ok)); err != nil || v != 1.5e9 {
		t.Fatalf("got %v, %v; want the receiver's 1.5e9", v, err)
	}
	for in, want := range map[string]string{
		`{"error":"unable to connect to server: Connection refused"}`: "Connection refused",
		`{"end":{}}`:    "no end.sum_received",
		`iperf3: error`: "not JSON",
	} {
		if _, err := iperfBitsPerSecond([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", in, err, want)
		}
	}
}

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	l := summarize(s, 2, os.ErrDeadlineExceeded)
	if l.N != 100 || l.Errors != 2 || l.P50 != 50*time.Microsecond || l.P99 != 99*time.Microsecond || l.FirstErr == "" {
		t.Fatalf("summarize = %+v", l)
	}
	if s[0] != 100*time.Microsecond {
		t.Fatal("summarize sorted its caller's slice")
	}
}

func TestProcessCPU(t *testing.T) {
	before, err := processCPU("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the kernel's own account (getrusage) says 50 ms more.
	r0 := rusageCPU(t)
	for deadline := time.Now().Add(10 * time.Second); rusageCPU(t)-r0 < 50*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatal("no 50 ms of CPU in 10 s")
		}
	}
	after, err := processCPU("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := after - before; d < 40*time.Millisecond || d > 5*time.Second {
		t.Fatalf("50 ms of spinning counted as %v", d)
	}
	if _, err := processCPU("/proc", 1<<30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
