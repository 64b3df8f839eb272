package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// namedBackend is a second backend that says which backend ran the
// command.
type namedBackend struct{ name string }

func (b *namedBackend) Name() string { return b.name }

func (b *namedBackend) Run(_ context.Context, _ *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	io.WriteString(stdio.Stdout, "ran on "+b.name)
	return sandbox.Result{}, nil
}

// TestRunBackend: a request's "backend" picks one of the server's
// backends (neither of these can prepare sandboxes, so no warm pool
// serves them: TestPoolOtherBackend has pools on another backend); the
// server's own name is the default; an unknown one is a
// 400 that names the ones there are, for /run and /sandboxes alike, and
// nothing runs.
func TestRunBackend(t *testing.T) {
	main, other := &namedBackend{"main"}, &namedBackend{"other"}
	s := New(Options{
		Manager: sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{main, other}, Default: "main"}),
		Backend: "main",
		Resolve: func(_ context.Context, q RunSpec) (*sandbox.Spec, error) {
			return &sandbox.Spec{Args: q.Args, Rootfs: image.Rootfs{Host: true}}, nil
		},
		InsecureNoAuth: true,
	})
	ts := httptest.NewServer(s)
	defer ts.Close()
	defer s.pools.close()
	post := func(path, body string) (int, string) {
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		body string
		code int
		want string
	}{
		{`{"command":["true"],"fast":false}`, 200, "ran on main"},
		{`{"command":["true"],"fast":false,"backend":"other"}`, 200, "ran on other"},
		{`{"command":["true"],"backend":"OTHER"}`, 200, "ran on other"},
		{`{"command":["true"],"fast":false,"backend":"main"}`, 200, "ran on main"},
		{`{"command":["true"],"fast":false,"backend":null}`, 200, "ran on main"},
		{`{"command":["true"],"backend":"nope"}`, 400, `unknown backend \"nope\"; available: main, other`},
	} {
		code, body := post("/run", c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("POST /run %s: %d %s, want %d with %s", c.body, code, body, c.code, c.want)
		}
	}
	if code, body := post("/batch/run", `{"commands":[{"command":["true"],"backend":"other"},{"command":["true"],"backend":"nope"}]}`); code != 200 ||
		!strings.Contains(body, "ran on other") || !strings.Contains(body, `unknown backend \"nope\"`) {
		t.Errorf("POST /batch/run: %d %s", code, body)
	}
	if code, body := post("/sandboxes", `{"name":"box","backend":"nope"}`); code != 400 || !strings.Contains(body, `unknown backend \"nope\"`) {
		t.Errorf("POST /sandboxes with an unknown backend: %d %s", code, body)
	}
}

// TestDefaultBackend: a server whose default backend (Options.Backend,
// serve's [sandbox] backend) is not native runs requests that name no
// backend there, /run and /sandboxes alike; one that names native still
// gets native.
func TestDefaultBackend(t *testing.T) {
	native, other := &namedBackend{"native"}, &namedBackend{"other"}
	s := New(Options{
		Manager: sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{native, other}, Default: "native"}),
		Backend: "other",
		Resolve: func(_ context.Context, q RunSpec) (*sandbox.Spec, error) {
			return &sandbox.Spec{Args: q.Args, Rootfs: image.Rootfs{Host: true}}, nil
		},
		InsecureNoAuth: true,
	})
	ts := httptest.NewServer(s)
	defer ts.Close()
	defer s.pools.close()
	for _, c := range []struct{ body, want string }{
		{`{"command":["true"],"fast":false}`, "ran on other"},
		{`{"command":["true"]}`, "ran on other"},
		{`{"command":["true"],"fast":false,"backend":"native"}`, "ran on native"},
		{`{"command":["true"],"fast":false,"backend":"Other"}`, "ran on other"},
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/run", strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), c.want) {
			t.Errorf("POST /run %s: %d %s, want 200 with %s", c.body, resp.StatusCode, b, c.want)
		}
	}
	if got, err := s.backend(""); err != nil || got != "other" {
		t.Errorf("backend(\"\") = %q, %v; want other", got, err)
	}
}

// TestAutoBackend: "auto", as a request's backend or as the server's
// default, is decided per request with its own spec by the Manager's
// ladder: here the ladder sends commands starting with "strong" to the
// other backend and the rest to native.
func TestAutoBackend(t *testing.T) {
	native, other := &namedBackend{"native"}, &namedBackend{"other"}
	ladder := func(_ context.Context, s *sandbox.Spec) (string, string) {
		if len(s.Args) > 0 && s.Args[0] == "strong" {
			return "other", "test ladder"
		}
		return "native", "test ladder"
	}
	for _, def := range []string{"auto", "native"} {
		s := New(Options{
			Manager: sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{native, other}, Default: "native", PickAuto: ladder}),
			Backend: def,
			Resolve: func(_ context.Context, q RunSpec) (*sandbox.Spec, error) {
				return &sandbox.Spec{Args: q.Args, Rootfs: image.Rootfs{Host: true}}, nil
			},
			InsecureNoAuth: true,
		})
		ts := httptest.NewServer(s)
		cases := []struct{ body, want string }{
			{`{"command":["strong"],"fast":false,"backend":"auto"}`, "ran on other"},
			{`{"command":["weak"],"backend":"AUTO"}`, "ran on native"},
		}
		if def == "auto" {
			cases = append(cases,
				struct{ body, want string }{`{"command":["strong"],"fast":false}`, "ran on other"},
				struct{ body, want string }{`{"command":["weak"]}`, "ran on native"},
				struct{ body, want string }{`{"command":["strong"],"backend":"native"}`, "ran on native"})
		}
		for _, c := range cases {
			req, _ := http.NewRequest("POST", ts.URL+"/run", strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(b), c.want) {
				t.Errorf("default %s: POST /run %s: %d %s, want 200 with %s", def, c.body, resp.StatusCode, b, c.want)
			}
		}
		ts.Close()
		s.pools.close()
	}
}
