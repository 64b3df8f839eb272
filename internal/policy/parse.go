package policy

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// maxMemoryMB bounds --memory (1 PiB): beyond it the number is a typo.
const maxMemoryMB = 1 << 30

// ParseMemory reads a memory size and returns megabytes: "512m", "2g",
// "1.5g", "512MiB", "1048576k"; a bare number is megabytes ("1024").
// Zero, negative, fractional-megabyte and unparsable values are errors.
func ParseMemory(s string) (int64, error) {
	in := strings.TrimSpace(s)
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("invalid memory size %q: %s (use e.g. 512m, 2g, or a number of megabytes)", s, why)
	}
	if in == "" {
		return bad("empty")
	}
	// ASCII-only lowering: strings.ToLower would turn U+212A (KELVIN
	// SIGN) into "k" and accept it as a unit.
	lower := strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, in)
	num := strings.TrimRight(lower, "kmgtib")
	unit := lower[len(num):]
	var mult float64
	switch unit {
	case "", "m", "mb", "mib":
		mult = 1
	case "k", "kb", "kib":
		mult = 1.0 / 1024
	case "g", "gb", "gib":
		mult = 1024
	case "t", "tb", "tib":
		mult = 1024 * 1024
	default:
		return bad("unknown unit " + strconv.Quote(unit))
	}
	if num == "" || strings.ContainsAny(num, "+-eEx_") {
		if strings.HasPrefix(num, "-") {
			return bad("must be positive")
		}
		return bad("not a number")
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return bad("not a number")
	}
	mb := v * mult
	switch {
	case mb <= 0:
		return bad("must be positive")
	case mb > maxMemoryMB:
		return bad("too large")
	case mb < 1:
		return bad("smaller than one megabyte")
	}
	return int64(math.Round(mb)), nil
}

// ParseVolume reads -v HOST:SANDBOX[:OPTIONS]. OPTIONS is a comma list of
// ro, rw (the default) and cow (copy-on-write: writes stay in the
// sandbox). A relative or ~ host path is resolved against cwd or home; it
// must exist. The sandbox path must be absolute, must not contain "..",
// and must not be /, /proc, /sys or /dev (or under them).
func ParseVolume(spec, cwd, home string) (sandbox.Mount, error) {
	bad := func(format string, args ...any) (sandbox.Mount, error) {
		return sandbox.Mount{}, fmt.Errorf("invalid volume %q: %s (use HOST:SANDBOX[:ro])", spec, fmt.Sprintf(format, args...))
	}
	if strings.ContainsRune(spec, 0) {
		return bad("contains a NUL byte")
	}
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return bad("expected two or three ':'-separated parts")
	}
	host, dest := parts[0], parts[1]
	m := sandbox.Mount{Kind: sandbox.MountBind}
	if len(parts) == 3 {
		for _, opt := range strings.Split(parts[2], ",") {
			switch opt {
			case "ro":
				m.ReadOnly = true
			case "rw":
			case "cow":
				m.Kind = sandbox.MountCopyOnWrite
			default:
				return bad("unknown option %q (use ro, rw or cow)", opt)
			}
		}
	}
	if host == "" {
		return bad("empty host path")
	}
	if host == "~" || strings.HasPrefix(host, "~/") {
		if home == "" {
			return bad("~ used but the home directory is unknown")
		}
		host = filepath.Join(home, host[1:])
	}
	if !filepath.IsAbs(host) {
		if cwd == "" {
			return bad("relative host path and no working directory")
		}
		host = filepath.Join(cwd, host)
	}
	host = filepath.Clean(host)
	if _, err := os.Stat(host); err != nil {
		return bad("host path %s does not exist or cannot be read", host)
	}
	// Symlinks resolved now: the backend mounts the path with none, so
	// that nobody can swap one in between.
	if real, err := filepath.EvalSymlinks(host); err == nil {
		host = real
	}
	if err := checkSandboxPath(dest); err != nil {
		return bad("%v", err)
	}
	m.Source, m.Dest = host, path.Clean(dest)
	return m, nil
}

// checkSandboxPath accepts an absolute sandbox path that a mount may cover.
func checkSandboxPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("sandbox path %q must be absolute", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("sandbox path %q must not contain \"..\"", p)
		}
	}
	c := path.Clean(p)
	if c == "/" {
		return fmt.Errorf("cannot mount over the sandbox's root")
	}
	for _, sys := range []string{"/proc", "/sys", "/dev"} {
		if c == sys || strings.HasPrefix(c, sys+"/") {
			return fmt.Errorf("cannot mount over %s", sys)
		}
	}
	return nil
}

// ParseEnv reads one -e value: "KEY=VALUE", or a bare "KEY" whose value is
// taken from the host (ok is false when the host does not have it).
func ParseEnv(s string, lookup func(string) (string, bool)) (kv string, ok bool, err error) {
	key, val, hasVal := strings.Cut(s, "=")
	if err := checkEnvKey(key); err != nil {
		return "", false, fmt.Errorf("invalid environment variable %q: %v", s, err)
	}
	if strings.ContainsRune(val, 0) {
		return "", false, fmt.Errorf("invalid environment variable %q: the value contains a NUL byte", key)
	}
	if hasVal {
		return key + "=" + val, true, nil
	}
	if lookup == nil {
		return "", false, nil
	}
	v, found := lookup(key)
	if !found || strings.ContainsRune(v, 0) {
		return "", false, nil
	}
	return key + "=" + v, true, nil
}

func checkEnvKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("empty name")
	case strings.ContainsAny(key, "\x00 \t\r\n"):
		return fmt.Errorf("the name contains white space or a NUL byte")
	}
	return nil
}

// maxEnvFileSize caps an --env-file.
const maxEnvFileSize = 1 << 20

// ParseEnvFile reads an --env-file: one KEY=VALUE per line (the value is
// taken literally, quotes included, as docker does), a bare KEY takes the
// host's value, and empty lines and lines starting with '#' are skipped.
// name is used in error messages ("file:line: ...").
func ParseEnvFile(r io.Reader, name string, lookup func(string) (string, bool)) ([]string, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxEnvFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > maxEnvFileSize {
		return nil, fmt.Errorf("%s: env file is larger than %d bytes", name, maxEnvFileSize)
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 0, 4096), maxEnvFileSize+1)
	for n := 1; sc.Scan(); n++ {
		// bufio.ScanLines already dropped one "\r" of a CRLF ending;
		// any other "\r" belongs to the value.
		line := strings.TrimLeft(sc.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kv, ok, err := ParseEnv(line, lookup)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, n, err)
		}
		if ok {
			out = append(out, kv)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// CommandRules resolves [security.commands] into the spec's rules, with
// where each list was set for the messages. It never returns nil.
func CommandRules(cfg *config.Config) *sandbox.CommandRules {
	c := cfg.Security.Commands
	r := &sandbox.CommandRules{
		Allow:         slices.Clone(c.Allow),
		Block:         slices.Clone(c.Block),
		AllowlistOnly: c.AllowlistOnly,
		BlockFrom:     setIn(cfg, "security.commands.block"),
		AllowFrom:     setIn(cfg, "security.commands.allowlist_only"),
	}
	if r.AllowFrom == "" {
		r.AllowFrom = setIn(cfg, "security.commands.allow")
	}
	return r
}

// setIn is "path:line" of the file that set key ("" for defaults).
func setIn(cfg *config.Config, key string) string {
	s := cfg.Source(key)
	switch {
	case s.Path == "":
		return ""
	case s.Line > 0:
		return s.Path + ":" + strconv.Itoa(s.Line)
	}
	return s.Path
}

// NewID returns a random 12-hex-digit sandbox ID.
func NewID() string {
	var b [6]byte
	randomBytes(b[:])
	return hex.EncodeToString(b[:])
}

// ValidateHostname accepts 1-63 characters of letters, digits, '-' and
// '.', not starting or ending with '-' or '.' (the kernel allows 64).
func ValidateHostname(h string) error {
	if h == "" || len(h) > 63 {
		return fmt.Errorf("invalid hostname %q: use 1 to 63 characters", h)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && c != '-' && c != '.' {
			return fmt.Errorf("invalid hostname %q: use letters, digits, '-' and '.'", h)
		}
	}
	if strings.ContainsAny(h[:1], "-.") || strings.ContainsAny(h[len(h)-1:], "-.") {
		return fmt.Errorf("invalid hostname %q: it must start and end with a letter or digit", h)
	}
	return nil
}
