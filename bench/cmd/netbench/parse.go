package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/bench/harness"
)

// latency is what a client reports about a run of timed operations.
type latency struct {
	N      int           `json:"n"`
	Errors int           `json:"errors"`
	P50    time.Duration `json:"p50"`
	P99    time.Duration `json:"p99"`
	// FirstErr is the first failure's text, "" when none failed.
	FirstErr string `json:"first_err,omitempty"`
}

// summarize turns samples (in any order) into a latency.
func summarize(samples []time.Duration, errs int, firstErr error) latency {
	s := slices.Clone(samples)
	slices.Sort(s)
	l := latency{N: len(s), Errors: errs, P50: harness.Percentile(s, 50), P99: harness.Percentile(s, 99)}
	if firstErr != nil {
		l.FirstErr = firstErr.Error()
	}
	return l
}

// iperfBitsPerSecond reads the receiver's rate from `iperf3 -J` output:
// end.sum_received, which is the server's count for an upload and the
// client's for a download (-R).
func iperfBitsPerSecond(out []byte) (float64, error) {
	var r struct {
		Error string `json:"error"`
		End   struct {
			SumReceived *struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, fmt.Errorf("iperf3 output is not JSON: %w", err)
	}
	if r.Error != "" {
		return 0, fmt.Errorf("iperf3: %s", r.Error)
	}
	if r.End.SumReceived == nil {
		return 0, errors.New("iperf3 output has no end.sum_received")
	}
	return r.End.SumReceived.BitsPerSecond, nil
}

// statCPU parses the user and system time (clock ticks, fields 14 and
// 15) of a /proc/PID/stat line. The command name in parentheses may hold
// spaces and parentheses itself, so fields are counted from the last ')'.
func statCPU(line string) (ticks uint64, err error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, errors.New("malformed stat line")
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, errors.New("short stat line")
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("malformed utime/stime")
	}
	return u + s, nil
}

// clockTick is the kernel's USER_HZ on every Linux architecture Go
// supports.
const clockTick = 10 * time.Millisecond

// processCPU is the CPU time process pid has used so far, all threads:
// the sum of its threads' schedstat run times (nanoseconds) where the
// kernel has them, else utime+stime from /proc/PID/stat (10 ms ticks,
// dead threads included).
func processCPU(proc string, pid int) (time.Duration, error) {
	dir := filepath.Join(proc, strconv.Itoa(pid))
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	if err == nil {
		var sum time.Duration
		ok := true
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "schedstat"))
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // thread ended between the listing and the read
				}
				ok = false
				break
			}
			f := strings.Fields(string(b))
			if len(f) == 0 {
				ok = false
				break
			}
			ns, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				ok = false
				break
			}
			sum += time.Duration(ns)
		}
		if ok && len(tasks) > 0 {
			return sum, nil
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return 0, err
	}
	t, err := statCPU(string(b))
	return time.Duration(t) * clockTick, err
}
