package gvisor

import (
	"encoding/binary"
	"runtime"
)

// idleInit is a persistent sandbox's first process: a static program of
// a few dozen bytes that reaps whatever ends up its child and otherwise
// sleeps, so that the sandbox lives, at no cost, until it is stopped,
// whatever the image holds. Commands run beside it (runsc exec). It is
// written to the sandbox's runtime directory and bound read-only into
// the sandbox at idlePath.
//
//	loop: wait4(-1, NULL, 0, NULL)   ; a child reaped: again
//	      if it failed (ECHILD): nanosleep({1, 0}, NULL)
//	      jmp loop
//
// It exists for amd64 only; elsewhere a persistent gvisor sandbox is
// refused (idleInit returns nil).
func idleInit() []byte {
	if runtime.GOARCH != "amd64" {
		return nil
	}
	code := []byte{
		0xbf, 0xff, 0xff, 0xff, 0xff, // mov edi, -1
		0x31, 0xf6, // xor esi, esi
		0x31, 0xd2, // xor edx, edx
		0x45, 0x31, 0xd2, // xor r10d, r10d
		0xb8, 0x3d, 0x00, 0x00, 0x00, // mov eax, 61 (wait4)
		0x0f, 0x05, // syscall
		0x48, 0x85, 0xc0, // test rax, rax
		0x79, 0xe8, // jns loop
		0x48, 0x8d, 0x3d, 0x0b, 0x00, 0x00, 0x00, // lea rdi, [rip+11] (ts)
		0x31, 0xf6, // xor esi, esi
		0xb8, 0x23, 0x00, 0x00, 0x00, // mov eax, 35 (nanosleep)
		0x0f, 0x05, // syscall
		0xeb, 0xd6, // jmp loop
		1, 0, 0, 0, 0, 0, 0, 0, // ts: 1 s
		0, 0, 0, 0, 0, 0, 0, 0, // 0 ns
	}
	const base, hdr = 0x400000, 64 + 56
	le := binary.LittleEndian
	b := make([]byte, hdr, hdr+len(code))
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le.PutUint16(b[16:], 2)    // ET_EXEC
	le.PutUint16(b[18:], 0x3e) // EM_X86_64
	le.PutUint32(b[20:], 1)    // EV_CURRENT
	le.PutUint64(b[24:], base+hdr)
	le.PutUint64(b[32:], 64) // program headers
	le.PutUint16(b[52:], 64) // ELF header size
	le.PutUint16(b[54:], 56) // program header size
	le.PutUint16(b[56:], 1)  // one of them
	ph := b[64:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // R+X
	le.PutUint64(ph[16:], base)
	le.PutUint64(ph[24:], base)
	le.PutUint64(ph[32:], uint64(hdr+len(code)))
	le.PutUint64(ph[40:], uint64(hdr+len(code)))
	le.PutUint64(ph[48:], 0x1000)
	return append(b, code...)
}

// idlePath is where a persistent sandbox's idle init is bound.
const idlePath = "/.agentkernel-idle"
