package native

import "github.com/agentkernel/agentkernel/internal/backend/native/stub"

// execStub is the assembled stub (package stub): the exec stage without
// a Go runtime (see stub_linux.go).
var execStub = stub.Binary
