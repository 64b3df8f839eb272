# idle: PID 1 of a persistent sandbox on a container engine, as a few
# dozen bytes of x86-64 (the image may have no sleep, no shell). It
# blocks SIGCHLD and SIGTERM and waits for them: SIGCHLD reaps every
# exited child (the orphans the kernel hands to PID 1); SIGTERM is
# passed on to every other process of the sandbox (kill(-1)), so that a
# stop's grace period reaches the commands, and the idler itself stays
# until the engine's SIGKILL. It opens nothing, reads nothing, writes
# nothing. Anywhere but as PID 1 (of a PID namespace) it exits 2 at
# once: kill(-1) from any other process reaches every process its user
# may signal.
#
# Rebuild: go generate ./internal/backend/engine/idle (needs binutils).

.intel_syntax noprefix
.set SIGTERM, 15
.set SIGCHLD, 17

.globl _start
.text
_start:
	mov eax, 39                 # getpid()
	syscall
	cmp eax, 1
	je pid1
	mov eax, 231                # exit_group(2)
	mov edi, 2
	syscall
pid1:
	mov eax, 14                 # rt_sigprocmask(SIG_BLOCK, &set, NULL, 8)
	xor edi, edi
	lea rsi, [rip + set]
	xor edx, edx
	mov r10d, 8
	syscall
reap:
	mov eax, 61                 # wait4(-1, NULL, WNOHANG, NULL)
	mov rdi, -1
	xor esi, esi
	mov edx, 1
	xor r10d, r10d
	syscall
	test rax, rax
	jg reap                     # one reaped: there may be more
wait:
	mov eax, 128                # rt_sigtimedwait(&set, NULL, NULL, 8)
	lea rdi, [rip + set]
	xor esi, esi
	xor edx, edx
	mov r10d, 8
	syscall
	cmp eax, SIGTERM
	jne reap
	mov eax, 62                 # kill(-1, SIGTERM)
	mov rdi, -1
	mov esi, SIGTERM
	syscall
	jmp reap

.align 8
set:
	.quad (1 << (SIGTERM - 1)) | (1 << (SIGCHLD - 1))
