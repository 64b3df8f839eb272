package sandbox

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

func TestValidDetachedID(t *testing.T) {
	for id, ok := range map[string]bool{
		"0123456789abcdef": true, "ffffffffffffffff": true,
		"0123456789ABCDEF": false, "0123456789abcde": false, "0123456789abcdef0": false,
		"../../../etc/pas": false, "0123456789abcdeg": false, "": false, "0123456789abcd\x00f": false,
	} {
		if err := ValidDetachedID(id); (err == nil) != ok || (err != nil && !errors.Is(err, ErrInvalidID)) {
			t.Errorf("ValidDetachedID(%q) = %v", id, err)
		}
	}
}

// fakeGC is a Supervisor whose GC reports a fixed result.
type fakeGC struct{ res GCResult }

func (f fakeGC) Start(context.Context, string) (*Info, error)        { return nil, ErrUnsupported }
func (f fakeGC) Stop(context.Context, string, string) (*Info, error) { return nil, ErrUnsupported }
func (f fakeGC) GC(context.Context, bool) (GCResult, error)          { return f.res, nil }

// plainConn is a Conn without detached commands.
type plainConn struct{ Conn }

func (plainConn) Close() error { return nil }

type plainConnector struct{}

func (plainConnector) Connect(context.Context, string) (Conn, error) { return plainConn{}, nil }

func TestGetByUUIDAndGCSandboxes(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	m := NewManager(ManagerOptions{Store: st, Connector: plainConnector{},
		Supervisor: fakeGC{res: GCResult{Sandboxes: []string{"old"}, Removed: []string{"sandbox old (expired)", "/sys/fs/cgroup/agentkernel/x", "/data/sandboxes/orphan", "sandbox gone (host uid range 1-2)"}}}})
	if _, _, err := m.Create(ctx, CreateRequest{Name: "dev", Spec: &Spec{Rootfs: hostRootfs()}}); err != nil {
		t.Fatal(err)
	}
	st.recs["dev"].UUID = "0190f2c4-1234-7abc-8def-0123456789ab"
	if i, err := m.GetByUUID(ctx, "0190F2C4-1234-7ABC-8DEF-0123456789AB"); err != nil || i.Name != "dev" {
		t.Errorf("by uuid: %+v %v", i, err)
	}
	if _, err := m.GetByUUID(ctx, "0190f2c4-1234-7abc-8def-0123456789aa"); !errors.Is(err, ErrSandboxNotFound) {
		t.Errorf("unknown uuid: %v", err)
	}
	for _, bad := range []string{"", "dev", "0190f2c4-1234-7abc-8def-0123456789a", "0190f2c4x1234-7abc-8def-0123456789ab", "g190f2c4-1234-7abc-8def-0123456789ab"} {
		if _, err := m.GetByUUID(ctx, bad); !errors.Is(err, ErrInvalidUUID) {
			t.Errorf("malformed uuid %q: %v", bad, err)
		}
	}
	// gc's answer names sandboxes only, never cgroups or directories.
	if got, err := m.GCSandboxes(ctx); err != nil || !reflect.DeepEqual(got, []string{"old"}) {
		t.Errorf("gc: %q %v", got, err)
	}
	// A connection without detached commands: unsupported, said so.
	if _, err := m.DetachedList(ctx, "dev"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("detached list: %v", err)
	}
	if _, err := m.DetachedStatus(ctx, "dev", "nope"); !errors.Is(err, ErrInvalidID) {
		t.Errorf("status of a bad id: %v", err)
	}
	if _, err := m.DetachedLogs(ctx, "dev", "0123456789abcdef", "stdin", 0, nil); err == nil {
		t.Errorf("logs of stdin: no error")
	}
	if _, err := m.DetachedLogs(ctx, "dev", "0123456789abcdef", "stdout", -1, nil); !errors.Is(err, ErrLogOffset) {
		t.Errorf("negative offset: %v", err)
	}
}
