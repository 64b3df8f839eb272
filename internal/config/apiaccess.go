package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// NormalizeAllowedHost checks one entry of [api] allowed_hosts (or
// 'serve --allowed-host'): "*", an IP address, or an exact host name,
// without scheme or port. It returns the entry in lower case (an IP in
// its canonical form).
func NormalizeAllowedHost(h string) (string, error) {
	h = strings.ToLower(strings.TrimSpace(h))
	switch {
	case h == "":
		return "", fmt.Errorf("an allowed host must not be empty")
	case h == "*":
		return h, nil
	case strings.Contains(h, "://") || strings.ContainsAny(h, "/?#@"):
		return "", fmt.Errorf("allowed host %q: give the host name alone (no scheme or path)", h)
	case strings.Contains(h, "*"):
		return "", fmt.Errorf("allowed host %q: give the exact name (wildcards are not supported; \"*\" alone allows every name)", h)
	}
	bare := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ".")
	if ip, err := netip.ParseAddr(bare); err == nil {
		return ip.Unmap().WithZone("").String(), nil
	}
	if strings.Contains(bare, ":") {
		return "", fmt.Errorf("allowed host %q: give the name without a port", h)
	}
	if len(bare) > 253 {
		return "", fmt.Errorf("allowed host %q: too long for a host name", h)
	}
	for _, label := range strings.Split(bare, ".") {
		if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
			return "", fmt.Errorf("allowed host %q is not a host name", h)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("allowed host %q is not a host name", h)
			}
		}
	}
	return bare, nil
}

// NormalizeOrigin checks one entry of [api] allowed_origins (or 'serve
// --allowed-origin'): a web origin as browsers send it, scheme://host with
// an optional port, http or https. It returns it in the form browsers
// send (lower case, default port left out).
func NormalizeOrigin(o string) (string, error) {
	o = strings.TrimSpace(o)
	switch strings.ToLower(o) {
	case "":
		return "", fmt.Errorf("an allowed origin must not be empty")
	case "*":
		return "", fmt.Errorf("allowed origin \"*\": name the origins one by one (every web page could run commands otherwise)")
	case "null":
		return "", fmt.Errorf("allowed origin \"null\" would let sandboxed frames and local files of any page through: name the real origin")
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("allowed origin %q: give it as scheme://host[:port] (http or https), e.g. http://localhost:3000", o)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("allowed origin %q: an origin is scheme://host[:port], with no path, query or user", o)
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("allowed origin %q: bad port", o)
		}
	}
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	out := strings.ToLower(u.Scheme) + "://" + host
	if port != "" {
		out += ":" + port
	}
	return out, nil
}

// LoadUser reads the defaults and the user-wide file alone (opts.UserPath
// and opts.NoUserFile as for Load; no project file), validated. Settings
// that a project's own agentkernel.toml may not choose (such as who may
// use the HTTP API) are taken from here when that file sets them too,
// since Load lets the project's value replace the user's.
func LoadUser(opts LoadOptions) (*Config, []Warning, error) {
	c := Defaults()
	warns, err := c.applyUser(opts)
	if err != nil {
		return nil, warns, err
	}
	if err := c.validate(); err != nil {
		return nil, warns, err
	}
	return c, warns, nil
}
