//go:build linux && !amd64 && !arm64

package native

// auditArch is zero: seccomp filters are only built for amd64 and arm64;
// compileSeccomp fails elsewhere.
const auditArch = 0

// x32Bit is zero off amd64.
const x32Bit = 0

// syscallTable is empty on architectures without a table.
var syscallTable = [...]syscallEntry{{"", 0}}
