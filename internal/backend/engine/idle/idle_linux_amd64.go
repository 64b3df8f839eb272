package idle

//go:generate sh -c "as --64 -o idle_amd64.o idle_amd64.S && ld -static -n -s --build-id=none -e _start -o idle_amd64.bin idle_amd64.o && rm idle_amd64.o"
//go:generate go run genbin.go
