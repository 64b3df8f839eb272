package netpolicy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
)

// maxResolvConf bounds how much of a resolv.conf is read.
const maxResolvConf = 1 << 20

// ReadResolvConf returns the nameservers of a resolv.conf file (port
// 53), or, like the C library, 127.0.0.1 and ::1 when it names none or
// does not exist.
func ReadResolvConf(path string) ([]netip.AddrPort, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return defaultResolvers(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the host's DNS servers: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxResolvConf))
	if err != nil {
		return nil, fmt.Errorf("reading the host's DNS servers: %w", err)
	}
	rs := parseResolvConf(data)
	if len(rs) == 0 {
		return defaultResolvers(), nil
	}
	return rs, nil
}

func defaultResolvers() []netip.AddrPort {
	return []netip.AddrPort{
		netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 53),
		netip.AddrPortFrom(netip.IPv6Loopback(), 53),
	}
}

func parseResolvConf(data []byte) []netip.AddrPort {
	var out []netip.AddrPort
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		line := s.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), 53))
		if len(out) == 8 {
			break
		}
	}
	return out
}
