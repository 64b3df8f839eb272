package prestart

// Init is a sandbox's PID 1 forked on a prestarted thread: the stub
// (stub.Argv0Init) waiting for its script on its fd 3, whose other end
// is Sock, and reporting a failed step on its fd 4, whose read end is Err.
type Init struct{ Pid, Sock, Err int }
