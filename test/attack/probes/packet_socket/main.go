//go:build linux

// Probe packet_socket tries to open an AF_PACKET socket (sniffing and
// injecting frames on any interface the namespace has).
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

const name = "packet_socket"

func main() {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0x0300 /* htons(ETH_P_ALL) */)
	if err == nil {
		unix.Close(fd)
		ifs, _ := net.Interfaces()
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		report("allowed", fmt.Sprintf("AF_PACKET socket opened; interfaces: %v", names))
	}
	report("blocked", "AF_PACKET: "+err.Error())
}

func report(result, detail string) {
	line, _ := json.Marshal(struct {
		Probe  string `json:"probe"`
		Result string `json:"result"`
		Detail string `json:"detail"`
	}{name, result, detail})
	fmt.Println(string(line))
	os.Exit(0)
}
