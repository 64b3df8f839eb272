package policy

import (
	"slices"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func TestResolveCaches(t *testing.T) {
	cfg := config.Defaults()
	cfg.Cache.Tools = []string{"pip"}
	in := Input{Config: cfg, Args: []string{"true"}, Cwd: t.TempDir(), CacheRoot: "/data/caches",
		Overrides: Overrides{Caches: []string{"go,npm"}, Env: []string{"GOCACHE=/mine"}}}
	spec, _, err := Resolve(in)
	if err != nil {
		t.Fatal(err)
	}
	var dests []string
	for _, m := range spec.Mounts {
		if m.Create {
			if m.Kind != sandbox.MountBind || m.ReadOnly {
				t.Errorf("cache mount %+v", m)
			}
			dests = append(dests, m.Source+"->"+m.Dest)
		}
	}
	want := []string{"/data/caches/pip->/var/cache/agentkernel/pip", "/data/caches/go->/var/cache/agentkernel/go", "/data/caches/npm->/var/cache/agentkernel/npm"}
	if !slices.Equal(dests, want) {
		t.Errorf("mounts %v, want %v", dests, want)
	}
	for _, kv := range []string{"GOCACHE=/mine", "GOMODCACHE=/var/cache/agentkernel/go/mod", "PIP_CACHE_DIR=/var/cache/agentkernel/pip", "npm_config_cache=/var/cache/agentkernel/npm"} {
		if !slices.Contains(spec.Env, kv) {
			t.Errorf("env lacks %s: %v", kv, spec.Env)
		}
	}
	if slices.Contains(spec.Env, "GOCACHE=/var/cache/agentkernel/go/build") {
		t.Errorf("the user's GOCACHE was overridden: %v", spec.Env)
	}

	in.Overrides = Overrides{Caches: []string{"none"}}
	if spec, _, err = Resolve(in); err != nil || slices.ContainsFunc(spec.Mounts, func(m sandbox.Mount) bool { return m.Create }) {
		t.Errorf("--cache none: %v %v", err, spec)
	}
	for _, bad := range [][]string{{"maven"}, {"go,"}, {"none", "go"}} {
		in.Overrides = Overrides{Caches: bad}
		if _, _, err := Resolve(in); err == nil {
			t.Errorf("--cache %v accepted", bad)
		}
	}
	// No cache root (a face without a data directory): configured caches
	// are left out with a warning, asked-for ones are an error.
	in.CacheRoot, in.Overrides = "", Overrides{}
	if _, warns, err := Resolve(in); err != nil || len(warns) == 0 {
		t.Errorf("[cache] without a root: %v %v", warns, err)
	}
	in.Overrides = Overrides{Caches: []string{"go"}}
	if _, _, err := Resolve(in); err == nil {
		t.Error("--cache go without a root accepted")
	}
}
