// Package idrange hands out the host uid/gid ranges that root-mode
// sandboxes run in, one range of Size ids per live sandbox, so that no
// two sandboxes, and no host user, share ids.
//
// # Which ids
//
// Ranges are carved from systemd's documented container range,
// 524288…1879048191 (First up to End), in blocks of Size = 65536, the
// same block size container runtimes use. A block is never handed out
// when it overlaps a range that /etc/subuid or /etc/subgid delegate to a
// user (useradd gives the first user 100000…165535, which is why a fixed
// range there let that user signal sandboxed processes), nor when a
// local account's uid or gid in /etc/passwd or /etc/group falls in it.
//
// # Allocation, crash-safe
//
// Allocations live in one directory for the whole machine (Dir; host
// ids are a machine-wide resource, whatever data directory a sandbox
// belongs to), one file per block, named by its first id:
//
//   - an ephemeral sandbox (a run, a warm-pool sandbox) holds an
//     exclusive flock(2) on an empty block file for as long as it lives
//     (Acquire). The kernel drops the lock when the process that holds
//     it dies, however it dies, so a crash never leaks a block;
//   - a persistent sandbox reserves its block for its whole life, across
//     stops and reboots, because its writable layer on disk is owned by
//     those ids: the block file then holds a Reservation (written and
//     fsynced under the same flock) until the sandbox is removed (Free).
//     A reservation whose sandbox no longer exists is found by
//     Reservations and removed by the data directory's gc.
//
// Nothing here needs a database: the lean run path takes a block with an
// open, a flock and an fstat, and reads two or four small files under
// /etc for the exclusions.
//
// flock rather than SQLite: every `agentkernel run` needs a block, and
// the binary that serves runs links no database; flock's release on
// process death is exactly the crash-safety wanted.
package idrange

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

const (
	// Size is the number of ids in a block: sandbox ids 0…Size-1.
	Size = 65536
	// First is the first id handed out (systemd's container range).
	First = 524288
	// End is one past the last id handed out.
	End = 1879048192
	// DefaultDir is where the block files live.
	DefaultDir = "/var/lib/agentkernel/idranges"
)

// ErrExhausted is returned when every block is taken or excluded.
var ErrExhausted = errors.New("no free host id range left")

// Files are the account files whose ids and delegated ranges no block
// may overlap. Tests point them elsewhere.
type Files struct {
	SubUID, SubGID, Passwd, Group string
}

// SystemFiles are the host's own account files.
var SystemFiles = Files{SubUID: "/etc/subuid", SubGID: "/etc/subgid", Passwd: "/etc/passwd", Group: "/etc/group"}

// Allocator allocates blocks in Dir, avoiding what Files name.
type Allocator struct {
	Dir   string
	Files Files
}

// Default is the machine's allocator.
func Default() Allocator { return Allocator{Dir: DefaultDir, Files: SystemFiles} }

// Lease is a block held by this process: an ephemeral sandbox's, or a
// persistent one's while it reserves or frees its block.
type Lease struct {
	// Base is the block's first host id: sandbox id n is host id Base+n.
	Base uint32
	fd   int // its block file, flock'ed; -1 once released
}

// Release gives the block back (an ephemeral one becomes free; a
// reservation stays).
func (l *Lease) Release() {
	if l != nil && l.fd >= 0 {
		syscall.Close(l.fd)
		l.fd = -1
	}
}

// Reservation is what a persistent sandbox's block file holds.
type Reservation struct {
	// DataDir and Name identify the sandbox (its data directory and
	// name); UUID tells a removed and re-created sandbox of the same name
	// from the original.
	DataDir string `json:"data_dir"`
	Name    string `json:"name"`
	UUID    string `json:"uuid,omitempty"`
}

func (r Reservation) same(o Reservation) bool {
	return r.DataDir == o.DataDir && r.Name == o.Name && r.UUID == o.UUID
}

// Acquire takes a free block for an ephemeral sandbox and holds it until
// Release (or the process's end).
func (a Allocator) Acquire() (*Lease, error) {
	return a.take(nil)
}

// Reserve takes a free block for a persistent sandbox and records r in
// it; the block stays reserved after this returns, until Free.
func (a Allocator) Reserve(r Reservation) (uint32, error) {
	l, err := a.take(&r)
	if err != nil {
		return 0, err
	}
	l.Release()
	return l.Base, nil
}

// Held reports whether block base is reserved for r.
func (a Allocator) Held(base uint32, r Reservation) (bool, error) {
	have, err := a.read(base)
	if err != nil {
		return false, err
	}
	return have != nil && have.same(r), nil
}

// Claim reserves block base for r when it is free (a reservation lost
// with its directory, or made before reservations existed): ok is false
// when the block is excluded, held or reserved by another sandbox.
func (a Allocator) Claim(base uint32, r Reservation) (ok bool, err error) {
	if base < First || base >= End || (base-First)%Size != 0 {
		return false, nil
	}
	ex, err := a.exclusions()
	if err != nil {
		return false, err
	}
	if ex.overlaps(base) {
		return false, nil
	}
	fd, err := a.lock(base, false)
	if err != nil || fd < 0 {
		return false, err
	}
	f := os.NewFile(uintptr(fd), a.path(base))
	defer f.Close()
	have, err := readReservation(f)
	if err != nil {
		return false, err
	}
	if have != nil {
		return have.same(r), nil
	}
	return true, writeReservation(f, &r)
}

// Free removes r's reservation of block base (nothing when the block is
// reserved by someone else or not at all).
func (a Allocator) Free(base uint32, r Reservation) error {
	f, err := a.lockWait(base)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	have, err := readReservation(f)
	if err != nil || have == nil || !have.same(r) {
		return err
	}
	return f.Truncate(0)
}

// Reservations lists the reserved blocks.
func (a Allocator) Reservations() (map[uint32]Reservation, error) {
	ents, err := os.ReadDir(a.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[uint32]Reservation{}
	for _, e := range ents {
		n, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		r, err := a.read(uint32(n))
		if err == nil && r != nil {
			out[uint32(n)] = *r
		}
	}
	return out, nil
}

func (a Allocator) read(base uint32) (*Reservation, error) {
	f, err := os.Open(a.path(base))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readReservation(f)
}

func (a Allocator) path(base uint32) string {
	return a.Dir + "/" + strconv.FormatUint(uint64(base), 10)
}

// take finds a free block, locks it and, for a reservation, records it.
// Reservations are taken from the bottom of the range up and ephemeral
// leases from the top down, so that a run meets only the blocks of the
// other runs alive at the same time, not every persistent sandbox's.
func (a Allocator) take(r *Reservation) (*Lease, error) {
	ex, err := a.exclusions()
	if err != nil {
		return nil, err
	}
	const blocks = (End - First) / Size
	for i := uint64(0); i < blocks; i++ {
		base := uint64(First) + i*Size
		if r == nil {
			base = uint64(First) + (blocks-1-i)*Size
		}
		if ex.overlaps(uint32(base)) {
			continue
		}
		fd, err := a.lock(uint32(base), true)
		if err != nil {
			return nil, err
		}
		if fd < 0 {
			continue // held by a live sandbox
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			syscall.Close(fd)
			return nil, err
		}
		if st.Size > 0 {
			syscall.Close(fd) // reserved by a persistent sandbox
			continue
		}
		if r != nil {
			f := os.NewFile(uintptr(fd), a.path(uint32(base)))
			err := writeReservation(f, r)
			f.Close()
			if err != nil {
				return nil, err
			}
			return &Lease{Base: uint32(base), fd: -1}, nil
		}
		return &Lease{Base: uint32(base), fd: fd}, nil
	}
	return nil, ErrExhausted
}

// lock opens block base's file and takes its lock without waiting, with
// plain system calls (it is on every run's path): -1 when another
// process holds it.
func (a Allocator) lock(base uint32, create bool) (int, error) {
	p := a.path(base)
	flags := syscall.O_RDWR | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	if create {
		flags |= syscall.O_CREAT
	}
	fd, err := syscall.Open(p, flags, 0o600)
	if err == syscall.ENOENT {
		// The first block ever taken here: make the directory.
		if err := os.MkdirAll(a.Dir, 0o700); err != nil {
			return -1, fmt.Errorf("host id ranges: %w", err)
		}
		fd, err = syscall.Open(p, flags|syscall.O_CREAT, 0o600)
	}
	if err != nil {
		return -1, fmt.Errorf("host id ranges: %s: %w", p, err)
	}
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EWOULDBLOCK {
		syscall.Close(fd)
		return -1, nil
	}
	if err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("host id ranges: locking %s: %w", p, err)
	}
	return fd, nil
}

// lockWait opens and locks an existing block file, waiting for the lock.
func (a Allocator) lockWait(base uint32) (*os.File, error) {
	f, err := os.OpenFile(a.path(base), os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func readReservation(f *os.File) (*Reservation, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Size == 0 {
		return nil, nil
	}
	b := make([]byte, min(st.Size, 64<<10))
	n, err := f.ReadAt(b, 0)
	if n == 0 && err != nil {
		return nil, err
	}
	var r Reservation
	if json.Unmarshal(b[:n], &r) != nil {
		// A torn write: reserved by somebody, whom we cannot tell.
		return &Reservation{Name: "?"}, nil
	}
	return &r, nil
}

func writeReservation(f *os.File, r *Reservation) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(append(b, '\n'), 0); err != nil {
		return err
	}
	return f.Sync()
}

// span is a half-open range of ids.
type span struct{ lo, hi uint64 }

type exclusions []span

func (ex exclusions) overlaps(base uint32) bool {
	lo, hi := uint64(base), uint64(base)+Size
	for _, s := range ex {
		if s.lo < hi && lo < s.hi {
			return true
		}
	}
	return false
}

// exclusions reads the ranges no block may overlap: every subordinate
// range and every local account id at or above First.
func (a Allocator) exclusions() (exclusions, error) {
	var ex exclusions
	for _, p := range []string{a.Files.SubUID, a.Files.SubGID} {
		if err := scan(p, func(f []string) {
			if len(f) < 3 {
				return
			}
			start, err1 := strconv.ParseUint(f[1], 10, 32)
			count, err2 := strconv.ParseUint(f[2], 10, 32)
			if err1 == nil && err2 == nil && count > 0 {
				ex = append(ex, span{start, start + count})
			}
		}); err != nil {
			return nil, err
		}
	}
	for _, p := range []string{a.Files.Passwd, a.Files.Group} {
		if err := scan(p, func(f []string) {
			if len(f) < 3 {
				return
			}
			if id, err := strconv.ParseUint(f[2], 10, 32); err == nil && id >= First {
				ex = append(ex, span{id, id + 1})
			}
		}); err != nil {
			return nil, err
		}
	}
	return ex, nil
}

// scan calls fn with the colon-separated fields of each line of path; a
// missing file has no lines. (One read and no scanner: it runs on every
// sandbox's start.)
func scan(path string, fn func([]string)) error {
	if path == "" {
		return nil
	}
	data, err := readSmall(path)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("host id ranges: %s: %w", path, err)
	}
	var fields [8]string
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		n := 0
		for n < len(fields) {
			j := bytes.IndexByte(line, ':')
			if j < 0 || n == len(fields)-1 {
				fields[n] = string(line)
				n++
				break
			}
			fields[n] = string(line[:j])
			line = line[j+1:]
			n++
		}
		fn(fields[:n])
	}
	return nil
}

// readSmall reads a small file with plain system calls: os.File's set-up
// per file is a measurable part of a run's start here.
func readSmall(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= 4<<20 {
				return nil, errors.New("file too large")
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}
