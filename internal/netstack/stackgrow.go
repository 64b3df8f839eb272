//go:build amd64 || arm64

package netstack

// GrowStack grows the calling goroutine's stack once, to about what a
// connection's goroutine comes to use (the policy, the host dial and the
// copies through the stack down to the device's write), while the stack
// is still shallow. A goroutine starts with the runtime's smallest stack,
// and each time a deeper call needs more, the whole stack is copied to
// one twice as large with its frames adjusted one by one; at the start of
// the goroutine that copy costs next to nothing. Call it first thing in a
// goroutine that runs a connection.
//
// On amd64 and arm64 it is an empty function with a large frame, so the
// frame is not cleared (stackgrow_*.s).
func GrowStack()
