package agent

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// CopyToPTY copies the caller's stdin to a pty's master. Where stdin is
// not a terminal (a pipe, a file), its end is passed on as the
// terminal's end-of-file character (VEOF, ^D unless the command changed
// it), twice after a last line without its newline (the first ends the
// line), so that a command reading its terminal sees the end as it
// would have seen the pipe's. A terminal's user types ^D themselves.
func CopyToPTY(master *os.File, in io.Reader, terminal bool) {
	last := byte('\n')
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			last = buf[n-1]
			if _, werr := master.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	if terminal {
		return
	}
	eof := byte(4)
	if tio, err := unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS); err == nil && tio.Cc[unix.VEOF] != 0 {
		eof = tio.Cc[unix.VEOF]
	}
	out := []byte{eof}
	if last != '\n' {
		out = append(out, eof)
	}
	_, _ = master.Write(out)
}
