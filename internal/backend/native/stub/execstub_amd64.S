# execstub: the exec stage of a sandbox as a few hundred bytes of x86-64,
# instead of a second Go runtime start. It runs "syscall scripts" built
# by the init (stub_linux.go) and ends in execve of the command.
#
# Protocol: scripts arrive on fd 3, each read completely and placed at
# the fixed address BASE, so every pointer in them is precomputed:
#   BASE+0   u64 total length of this script in bytes
#   BASE+8   u64 number of records
#   BASE+16  records, 64 bytes each:
#              u64 nr      syscall number, POKE or CHAIN
#              u64 flags   bit i (0-5): arg i is the index of an earlier
#                          record of this script whose result to use;
#                          bit 8: ignore errors
#              u64 args[6]
#   ...      data the records point at
# Results are kept at RES + 8*index. POKE stores arg1 at address arg0
# (e.g. a file descriptor into a Landlock rule). CHAIN reads the next
# script and runs it. FORK forks: the child goes on with the script (its
# result is 0), the parent writes the child's pid (u64) to fd 3 and exits
# 0, so that a stub that entered a PID namespace with setns starts its
# command inside it. On the first failing record the stub writes
# {u64 index, u64 errno} to fd 4 and exits 125.
#
# Rebuild: go generate ./internal/backend/native (needs binutils).

.intel_syntax noprefix
.set BASE, 0x7e000000
.set RES, 0x7e100000
.set SCRATCH, 0x7e1f0000
.set POKE, 0x100000000
.set CHAIN, 0x200000000
.set FORK, 0x300000000

.globl _start
.text
_start:
	mov eax, 9                  # mmap(BASE, 2 MiB, RW, PRIVATE|ANON|FIXED_NOREPLACE, -1, 0)
	mov edi, BASE
	mov esi, 0x200000
	mov edx, 3
	mov r10d, 0x100022
	mov r8, -1
	xor r9d, r9d
	syscall
	cmp rax, rdi
	jne fail
readscript:
	mov r12d, BASE              # write pointer
readloop:
	mov rcx, r12
	sub rcx, BASE               # bytes we have
	cmp rcx, 8
	jae 1f
	mov edx, 8                  # still reading the length
	sub rdx, rcx
	jmp 2f
1:	mov rdx, qword ptr ds:BASE
	cmp rdx, 16
	jb fail
	mov rax, RES-BASE
	cmp rdx, rax
	ja fail
	sub rdx, rcx                # bytes missing
	jz readdone
2:	xor eax, eax                # read(3, r12, rdx)
	mov edi, 3
	mov rsi, r12
	syscall
	test rax, rax
	jle fail
	add r12, rax
	jmp readloop
readdone:
	mov r14, qword ptr ds:BASE+8
	mov r13d, BASE+16
	xor r15d, r15d
next:
	cmp r15, r14
	jae fail
	mov rbx, [r13+8]
	mov rdi, [r13+16]
	test bl, 1
	jz 1f
	mov rdi, [RES+rdi*8]
1:	mov rsi, [r13+24]
	test bl, 2
	jz 2f
	mov rsi, [RES+rsi*8]
2:	mov rdx, [r13+32]
	test bl, 4
	jz 3f
	mov rdx, [RES+rdx*8]
3:	mov r10, [r13+40]
	test bl, 8
	jz 4f
	mov r10, [RES+r10*8]
4:	mov r8, [r13+48]
	test bl, 16
	jz 5f
	mov r8, [RES+r8*8]
5:	mov r9, [r13+56]
	test bl, 32
	jz 6f
	mov r9, [RES+r9*8]
6:	mov rax, [r13]
	mov rcx, CHAIN
	cmp rax, rcx
	je readscript
	mov rcx, POKE
	cmp rax, rcx
	jne 7f
	mov [rdi], rsi
	xor eax, eax
	jmp store
7:	mov rcx, FORK
	cmp rax, rcx
	jne call
	mov eax, 57                 # fork()
	syscall
	test rax, rax
	jle store                   # the child (0) goes on; an error fails
	mov qword ptr ds:SCRATCH, rax
	mov eax, 1                  # write(3, SCRATCH, 8): the child's pid
	mov edi, 3
	mov esi, SCRATCH
	mov edx, 8
	syscall
	mov eax, 231                # exit_group(0)
	xor edi, edi
	syscall
call:
	syscall
store:
	mov [RES+r15*8], rax
	cmp rax, -4095
	jb ok
	test bh, 1
	jnz ok
	neg rax
	mov qword ptr ds:SCRATCH, r15
	mov qword ptr ds:SCRATCH+8, rax
	mov eax, 1                  # write(4, SCRATCH, 16)
	mov edi, 4
	mov esi, SCRATCH
	mov edx, 16
	syscall
fail:
	mov eax, 231                # exit_group(125)
	mov edi, 125
	syscall
ok:
	add r13, 64
	inc r15
	jmp next
