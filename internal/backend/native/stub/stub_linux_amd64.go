package stub

// Binary (execstub_bin_linux_amd64.go) is execstub_amd64.S assembled.
//
//go:generate sh -c "as --64 -o execstub_amd64.o execstub_amd64.S && ld -static -n -s --build-id=none -e _start -o execstub_amd64.bin execstub_amd64.o && rm execstub_amd64.o"
//go:generate go run genbin.go
