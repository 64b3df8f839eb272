package gvisor

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestMarshalConfig: config.json as marshalConfig writes it is, byte for
// byte, json.Marshal of the whole specs.Spec, for the specs this backend
// builds (limits, the CPU quota hook, the set-id guard's seccomp filter,
// a terminal, a network namespace's path, volumes).
func TestMarshalConfig(t *testing.T) {
	p := &process{args: []string{"/bin/true"}, env: []string{"PATH=/bin"}, cwd: "/", uid: 1000, gid: 1000,
		groups: []int{1000, 27}, caps: []string{"CAP_CHOWN"}, noFile: 1024, rootDir: "/r/rootfs"}
	root := &process{args: []string{"sh"}, cwd: "/w", isRoot: true, caps: []string{"CAP_KILL"}, noFile: 64, rootDir: "/r/rootfs"}
	vols := []specs.Mount{{Destination: "/workspace", Type: "bind", Source: "/r/cow0/merged", Options: []string{"rbind", "rw"}}}
	var cases []*specs.Spec
	for _, spec := range []*sandbox.Spec{
		{Hostname: "h"},
		{Hostname: "h", ReadOnlyRoot: true, Resources: sandbox.Resources{MemoryMB: 512, CPUPercent: 50, PIDs: 256, DiskMB: 100}},
		{ReadOnlyRoot: true, Resources: sandbox.Resources{PIDs: 10}, Mounts: []sandbox.Mount{{Dest: "/tmp", Kind: sandbox.MountTmpfs}}},
	} {
		for _, pr := range []*process{p, root} {
			s := ociSpec(spec, pr, vols, cgroupName("agentkernel-x"))
			cases = append(cases, s)
			c := ociSpec(spec, pr, nil, cgroupName("agentkernel-x"))
			cpuQuotaHook(c)
			c.Linux.Seccomp = native.SetidGuardProfile()
			c.Process.Terminal = true
			c.Process.ConsoleSize = &specs.Box{Height: 24, Width: 80}
			c.Linux.Namespaces[1].Path = "/r/state/netns"
			c.Annotations = map[string]string{annSandboxID: "agentkernel-x", annType: "sandbox", annName: "sandbox"}
			cases = append(cases, c)
		}
	}
	for i, s := range cases {
		if _, ok := asConfig(s); !ok {
			t.Errorf("case %d: the backend's own spec does not fit config", i)
		}
		got, err := marshalConfig(s)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(s)
		if !bytes.Equal(got, want) {
			t.Errorf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestMarshalConfigFallsBack: a spec that sets any field config does not
// carry (each of specs.Spec's, specs.Linux's and specs.LinuxResources'
// other fields in turn) is encoded whole: nothing is dropped.
func TestMarshalConfigFallsBack(t *testing.T) {
	base := func() *specs.Spec {
		return ociSpec(&sandbox.Spec{Resources: sandbox.Resources{MemoryMB: 64}},
			&process{args: []string{"x"}, cwd: "/", rootDir: "/r"}, nil, "cg")
	}
	carried := map[string]bool{
		"Spec.Version": true, "Spec.Process": true, "Spec.Root": true, "Spec.Hostname": true, "Spec.Mounts": true,
		"Spec.Hooks": true, "Spec.Annotations": true, "Spec.Linux": true, "Linux.Resources": true, "Linux.CgroupsPath": true,
		"Linux.Namespaces": true, "Linux.Seccomp": true, "LinuxResources.Memory": true,
		"LinuxResources.CPU": true, "LinuxResources.Pids": true,
	}
	n := 0
	for _, target := range []string{"Spec", "Linux", "LinuxResources"} {
		s := base()
		var v reflect.Value
		switch target {
		case "Spec":
			v = reflect.ValueOf(s).Elem()
		case "Linux":
			v = reflect.ValueOf(s.Linux).Elem()
		case "LinuxResources":
			v = reflect.ValueOf(s.Linux.Resources).Elem()
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if carried[target+"."+f.Name] {
				continue
			}
			s := base()
			var w reflect.Value
			switch target {
			case "Spec":
				w = reflect.ValueOf(s).Elem()
			case "Linux":
				w = reflect.ValueOf(s.Linux).Elem()
			case "LinuxResources":
				w = reflect.ValueOf(s.Linux.Resources).Elem()
			}
			w.Field(i).Set(nonZero(f.Type))
			n++
			if _, ok := asConfig(s); ok {
				t.Errorf("%s.%s set: config would drop it", target, f.Name)
			}
			got, err := marshalConfig(s)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(s)
			if !bytes.Equal(got, want) {
				t.Errorf("%s.%s set:\n got %s\nwant %s", target, f.Name, got, want)
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d fields tried: the check sees too little", n)
	}
}

// nonZero is a value of type t that is not its zero value.
func nonZero(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(t, 1, 1))
	case reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem())
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Struct:
		v.Field(0).Set(nonZero(t.Field(0).Type))
	}
	return v
}
