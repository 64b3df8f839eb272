package policy

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// CacheDir is where a cache is mounted inside the sandbox:
// /var/cache/agentkernel/<tool>.
const CacheDir = "/var/cache/agentkernel"

// cacheEnv points each tool at its cache (paths under CacheDir/<tool>).
var cacheEnv = map[string][]string{
	"go":    {"GOMODCACHE=" + CacheDir + "/go/mod", "GOCACHE=" + CacheDir + "/go/build"},
	"pip":   {"PIP_CACHE_DIR=" + CacheDir + "/pip"},
	"npm":   {"npm_config_cache=" + CacheDir + "/npm"},
	"cargo": {"CARGO_HOME=" + CacheDir + "/cargo"},
}

// ParseCaches reads --cache values: comma-separated names, repeatable;
// "none" stands alone and turns every cache off.
func ParseCaches(values []string) (tools []string, none bool, err error) {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(strings.ToLower(t))
			switch {
			case t == "":
				return nil, false, errors.New("--cache: an empty name: use go, pip, npm, cargo or none, separated by commas")
			case t == "none":
				none = true
			default:
				if err := config.ValidateCacheTool(t); err != nil {
					return nil, false, errors.New("--cache: " + err.Error())
				}
				if !slices.Contains(tools, t) {
					tools = append(tools, t)
				}
			}
		}
	}
	if none && len(tools) > 0 {
		return nil, false, errors.New("--cache none cannot be combined with cache names")
	}
	return tools, none, nil
}

// resolveCaches mounts the caches of [cache] tools and --cache, each a
// directory CacheRoot/<tool> bound read-write at CacheDir/<tool> (made on
// first use), and points the tool at it through its environment
// variable, unless the command line or the configuration set that
// variable already.
func resolveCaches(spec *sandbox.Spec, cfg *config.Config, o *Overrides, in Input, warnf func(string, ...any)) error {
	flagTools, none, err := ParseCaches(o.Caches)
	if err != nil {
		return err
	}
	var tools []string
	if !none {
		for _, t := range cfg.Cache.Tools {
			if !slices.Contains(tools, t) {
				tools = append(tools, t)
			}
		}
		for _, t := range flagTools {
			if !slices.Contains(tools, t) {
				tools = append(tools, t)
			}
		}
	}
	if len(tools) == 0 {
		return nil
	}
	if in.CacheRoot == "" {
		if len(flagTools) > 0 {
			return errors.New("--cache: persistent caches are not available here")
		}
		warnf("[cache] tools: persistent caches are not available here; running without them")
		return nil
	}
	set := map[string]bool{}
	for _, kv := range spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, t := range tools {
		spec.Mounts = append(spec.Mounts, sandbox.Mount{Kind: sandbox.MountBind, Source: filepath.Join(in.CacheRoot, t), Dest: CacheDir + "/" + t, Create: true})
		for _, kv := range cacheEnv[t] {
			if k, _, _ := strings.Cut(kv, "="); !set[k] {
				spec.Env = append(spec.Env, kv)
			}
		}
	}
	return nil
}
