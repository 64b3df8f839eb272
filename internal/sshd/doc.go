// Package sshd serves SSH into a persistent sandbox from the sandbox's
// supervisor, so that the image needs no sshd: OpenSSH's ssh, scp, sftp
// and an IDE's remote mode talk to it on 127.0.0.1.
//
// Authentication is by certificate only (keys.go): each sandbox has its
// own ed25519 certificate authority and host key, made at its first
// start in the sandbox's directory (<data-dir>/sandboxes/NAME/ssh, 0700,
// every private key 0600). 'agentkernel ssh connect' and 'ssh config'
// make a client key and a user certificate signed by that CA (principal:
// the sandbox's SSH user, "sandbox" unless set; key id
// agentkernel-client; valid for 30 minutes). The server accepts a
// certificate of this sandbox's CA, of type user, naming the user it
// logs in as, inside its validity window; a plain key, a password or
// keyboard-interactive login is never accepted. The client pins the host
// key through a known_hosts file the CLI writes (HostKeyAlias
// agentkernel-NAME, StrictHostKeyChecking yes).
//
// What a connection may do (server_linux.go): a session's shell (the user's shell
// from the sandbox's /etc/passwd, run as an interactive shell, not a
// login shell) or exec request is an exec in the sandbox through the supervisor's own agent
// socket, as the sandbox's user (the sandbox's command rules and the
// audit log apply as for 'agentkernel exec'); pty-req gives it a
// terminal (the sandbox's own pty, bridged), window-change resizes it,
// signal requests are passed on, and exit-status or exit-signal report
// its end. The sftp subsystem (sftp_linux.go, also what OpenSSH 9's scp
// speaks) works on the sandbox's files through agent.FS, confined below
// the sandbox's root by openat2 RESOLVE_IN_ROOT, never the host's.
// direct-tcpip (ssh -L) reaches only the sandbox's own loopback, dialled
// from inside its network namespace. Remote forwarding (-R), agent and
// X11 forwarding and every other channel type are refused.
//
// Each connection is audited: ssh_connected (the user and the
// certificate's fingerprint) and ssh_disconnected (how long it lasted).
package sshd
