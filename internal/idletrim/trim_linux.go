package idletrim

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"

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
	// Read with a small fixed buffer: whatever Trim allocates stays
	// resident in a process that rarely collects garbage.
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Stats{}, err
	}
	var buf [4096]byte
	var one [64]mapping
	maps, err := parseSmaps(f, buf[:], one[:0])
	f.Close()
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
// mapping in a /proc/PID/smaps text, appending to maps.
func parseSmaps(r io.Reader, buf []byte, maps []mapping) ([]mapping, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(buf, 1<<20)
	anon := []byte("Anonymous:")
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		if bytes.HasPrefix(line, anon) {
			if len(maps) > 0 {
				kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(line[len(anon):]), []byte("kB")))), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("smaps: %q: %w", line, err)
				}
				maps[len(maps)-1].anonKB = kb
			}
			continue
		}
		// A mapping's header starts with a hex address; field lines
		// ("Rss:", "VmFlags:") with a letter and a colon.
		first, _, _ := bytes.Cut(line, []byte(" "))
		if bytes.HasSuffix(first, []byte(":")) {
			continue
		}
		m, ok := parseHeader(line)
		if !ok {
			return nil, fmt.Errorf("smaps: unexpected line %q", line)
		}
		maps = append(maps, m)
	}
	return maps, sc.Err()
}

// parseHeader parses START-END PERMS OFFSET DEV INODE [PATH].
func parseHeader(line []byte) (mapping, bool) {
	var f [5][]byte
	rest := line
	for i := range f {
		rest = bytes.TrimLeft(rest, " ")
		var field []byte
		field, rest, _ = bytes.Cut(rest, []byte(" "))
		if len(field) == 0 {
			return mapping{}, false
		}
		f[i] = field
	}
	lo, hi, ok := bytes.Cut(f[0], []byte("-"))
	if !ok {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	inode, err3 := strconv.ParseUint(string(f[4]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || end < start {
		return mapping{}, false
	}
	// Unknown until its Anonymous line: assume the worst.
	return mapping{start: start, end: end, perms: string(f[1]), dev: string(f[3]), inode: inode, anonKB: -1}, true
}
