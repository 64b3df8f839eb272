package engine

import (
	"os"
	"strconv"
	"strings"
)

// ownerLabel is this process's LabelOwner: its pid and start time.
func ownerLabel() string {
	pid := os.Getpid()
	return strconv.Itoa(pid) + " " + strconv.FormatUint(procStart(pid), 10)
}

// procStart is pid's start time in clock ticks since boot (0 if gone).
func procStart(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// ownerAlive says whether the process a LabelOwner names still runs.
func ownerAlive(label string) bool {
	p, s, ok := strings.Cut(label, " ")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	start, err := strconv.ParseUint(s, 10, 64)
	return err == nil && start != 0 && procStart(pid) == start
}
