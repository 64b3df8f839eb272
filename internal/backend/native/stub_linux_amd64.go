package native

import _ "embed"

// execStub is stub/execstub_amd64.S assembled: the exec stage without a
// Go runtime (see stub_linux.go).
//
//go:generate sh -c "as --64 -o stub/execstub_amd64.o stub/execstub_amd64.S && ld -static -n -s --build-id=none -e _start -o stub/execstub_amd64.bin stub/execstub_amd64.o && rm stub/execstub_amd64.o"
//go:embed stub/execstub_amd64.bin
var execStub string
