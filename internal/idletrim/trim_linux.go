package idletrim

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Stats says what a Trim did.
type Stats struct {
	// Mappings and Bytes count the executable's mappings dropped and
	// their size.
	Mappings int
	Bytes    int64
}

// mapping is one entry of /proc/self/smaps.
type mapping struct {
	start, end uint64
	perms      string
	dev        string
	inode      uint64
	anonKB     int64
}

// Trim drops the page-table entries of the executable's read-only
// mappings that hold no private page.
func Trim() (Stats, error) {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return Stats{}, err
	}
	maps, err := parseSmaps(data)
	if err != nil {
		return Stats{}, err
	}
	var st Stats
	for _, m := range droppable(maps, uint64(reflect.ValueOf(Trim).Pointer())) {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), unix.MADV_DONTNEED); e != 0 {
			return st, fmt.Errorf("madvise %x-%x: %w", m.start, m.end, e)
		}
		st.Mappings++
		st.Bytes += int64(m.end - m.start)
	}
	return st, nil
}

// droppable picks, from maps, the mappings of the file that holds the
// code at pc which are read-only and hold no anonymous page.
func droppable(maps []mapping, pc uint64) []mapping {
	var exe *mapping
	for i := range maps {
		if maps[i].start <= pc && pc < maps[i].end && maps[i].inode != 0 {
			exe = &maps[i]
			break
		}
	}
	if exe == nil {
		return nil
	}
	var out []mapping
	for _, m := range maps {
		if m.inode != exe.inode || m.dev != exe.dev || len(m.perms) < 4 {
			continue
		}
		if m.perms[1] == 'w' || m.perms[3] != 'p' || m.anonKB != 0 {
			continue
		}
		out = append(out, m)
	}
	return out
}

// parseSmaps reads the header line and the Anonymous field of every
// mapping in a /proc/PID/smaps text.
func parseSmaps(data []byte) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if strings.HasSuffix(f[0], ":") {
			if f[0] == "Anonymous:" && len(out) > 0 && len(f) >= 2 {
				kb, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("smaps: %q: %w", line, err)
				}
				out[len(out)-1].anonKB = kb
			}
			continue
		}
		// A mapping's header: START-END PERMS OFFSET DEV INODE [PATH].
		if len(f) < 5 {
			return nil, fmt.Errorf("smaps: unexpected line %q", line)
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("smaps: unexpected line %q", line)
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		inode, err3 := strconv.ParseUint(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || end < start {
			return nil, fmt.Errorf("smaps: unexpected line %q", line)
		}
		// Unknown until its Anonymous line: assume the worst.
		out = append(out, mapping{start: start, end: end, perms: f[1], dev: f[3], inode: inode, anonKB: -1})
	}
	return out, sc.Err()
}
