//go:build !amd64 && !arm64

package netstack

// growStackPad is GrowStack's frame where no assembly version exists.
const growStackPad = 12 << 10

// GrowStack: see stackgrow.go. This version clears its frame.
//
//go:noinline
func GrowStack() { growStackFrame(stackSeed) }

//go:noinline
func growStackFrame(seed byte) byte {
	var pad [growStackPad]byte
	i := len(pad) - 1 - int(seed&1)
	pad[i] = seed
	return pad[i^1]
}

// stackSeed keeps growStackFrame's frame from being optimised away.
var stackSeed byte
