// Package agent is the protocol between the CLI (or any other client)
// and a sandbox's agent, and the agent's server (Server): exec with the
// client's descriptors as the command's stdio, signals, file operations
// confined to the sandbox's root (FS), stats and stop, over one
// listening socket, for any backend that implements Sandbox; and the
// client side (Dial, Client, and SandboxConn, a Client as a
// sandbox.Conn), the one every face uses: the supervisor's Manager, the
// API and agentkernel-full's CLI, and the agentkernel binary's exec, cp
// and attach, which link neither the supervisor nor its state store.
//
//	client ──unix socket (sandboxes/NAME/sock)──▶ supervisor (Server over native.Instance) ──stub──▶ command in the sandbox
//
// The native backend runs the server in the supervisor, outside the
// sandbox, so no privileged helper lives inside it; a backend that can
// only act from inside (a VM's guest init) runs the same server there.
//
// # Why a small framed protocol of our own
//
// A message is one SOCK_SEQPACKET datagram holding one JSON object
// (Request or Response), optionally with file descriptors attached
// (SCM_RIGHTS). Datagram boundaries are the framing, so there is no length
// prefix to get wrong and no partial message to resynchronise; the kernel
// keeps messages whole and in order. JSON keeps it debuggable (strace
// shows it) and costs little at these sizes; ttrpc would add
// protobuf code generation and a stream multiplexer we do not need, and it
// cannot pass descriptors.
//
// Passing descriptors is what makes exec cheap: the client hands its own
// stdin, stdout and stderr (or pipes, or a pty slave) to the agent, which
// gives them to the command as fds 0-2. Nothing copies bytes; a command's output reaches the client's
// terminal or pipe directly, and the exit status is one more datagram. File
// reads, writes and tar streams travel the same way: the client passes one
// end of a pipe and the agent reads or writes it.
//
// # Requests
//
// Every request carries an ID chosen by the sender; every response
// carries the ID of the request it answers. An exec is answered twice:
// Started (with the command's pid) and then Exit (its wait status), or
// once with an error. Other requests are answered once. Requests may be in
// flight concurrently on one connection.
//
// A connection's commands are its own: when it closes (the client was
// killed, or gave up) the server kills the commands it started and still
// runs, and reports each end through Server.Audit ("client gone").
// Detached commands (OpDetach; Server.ServeDetached) are the server's
// instead: started by one connection, listed, read (OpDetachedLogs, from
// a byte offset) and killed by any, they run on until they end or the
// sandbox stops, their stdout and stderr kept in files of a capped size
// (detached_linux.go).
//
// # Other backends
//
// Nothing here is specific to Linux namespaces. A gVisor sandbox runs the
// same agent as its init inside runsc and a microVM runs it as the guest's
// init; clients then reach it over a socket that runsc exposes or over
// virtio-vsock. Those transports carry no descriptors, so for them
// the Stream op (reserved) will carry stdio as Data frames tagged with the
// request ID and a stream number, in the same JSON messages over a
// length-prefixed stream; the request and response types stay the same.
package agent
