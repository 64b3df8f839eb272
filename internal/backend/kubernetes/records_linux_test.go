package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// server is what one `agentkernel serve` of the namespace holds: a
// Backend with a client of its own, and Sandboxes over it with a data
// directory of its own (so that nothing is shared but the cluster).
func server(t testing.TB, ns string) *Sandboxes {
	t.Helper()
	return NewSandboxes(backend(t, Options{Namespace: ns}), t.TempDir())
}

func recSpec() *sandbox.Spec {
	return &sandbox.Spec{Image: "alpine:3.20", Profile: "restrictive", Network: sandbox.Network{Mode: sandbox.NetworkNone},
		Args: []string{"x"}, Env: []string{"TOKEN=s3cret-value"}}
}

// recordSecrets lists the namespace's Secrets of the records' type, as
// the administrator.
func recordSecrets(t testing.TB, ns string) []corev1.Secret {
	t.Helper()
	l, err := admin(t).CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "type=" + string(RecordType)})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestRecordsInCluster: a record is a Secret of the records' type in the
// sandbox's namespace, labelled with the backend's labels and the name
// only (the spec, env values included, is in its data, not in a label
// or annotation anyone's selector reads); a second create of a name
// fails with ErrSandboxExists; max_sandboxes caps them; a spec a pod
// cannot be is refused before anything is made; Remove deletes the pod
// and the NetworkPolicy, then the record.
func TestRecordsInCluster(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	s := server(t, ns)
	s.MaxSandboxes = 2
	info := &sandbox.Info{Name: "one", Labels: map[string]string{"team": "a"}, Description: "d"}
	if err := s.Create(ctx, info, recSpec()); err != nil {
		t.Fatal(err)
	}
	if info.UUID == "" || info.Backend != BackendName || info.Status != sandbox.StatusStopped {
		t.Errorf("info: %+v", info)
	}
	if err := s.Create(ctx, &sandbox.Info{Name: "one"}, recSpec()); !errors.Is(err, sandbox.ErrSandboxExists) {
		t.Errorf("second create: %v", err)
	}
	if err := s.Create(ctx, &sandbox.Info{Name: "two"}, recSpec()); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, &sandbox.Info{Name: "three"}, recSpec()); err == nil || !strings.Contains(err.Error(), "max_sandboxes = 2") {
		t.Errorf("third create: %v", err)
	}
	got, err := s.Spec(ctx, "one")
	if err != nil || got.Profile != "restrictive" || got.ID == "" || len(got.Env) != 1 {
		t.Errorf("spec: %+v %v", got, err)
	}
	secs := recordSecrets(t, ns)
	if len(secs) != 2 {
		t.Fatalf("%d record Secrets, want 2", len(secs))
	}
	for _, sec := range secs {
		name := strings.TrimPrefix(sec.Name, "agentkernel-sandbox-")
		want := map[string]string{ManagedLabel: ManagedValue, SandboxLabel: name}
		if fmt.Sprint(sec.Labels) != fmt.Sprint(want) || len(sec.Annotations) != 0 || len(sec.Data) != 1 {
			t.Errorf("Secret %s: labels %v, annotations %v, %d keys", sec.Name, sec.Labels, sec.Annotations, len(sec.Data))
		}
		var r record
		if err := json.Unmarshal(sec.Data[recordKey], &r); err != nil || r.Info.Name != name || r.Spec.Env[0] != "TOKEN=s3cret-value" {
			t.Errorf("Secret %s's record: %+v %v", sec.Name, r, err)
		}
	}
	// A spec a pod cannot be is refused at create, and makes nothing.
	bad := recSpec()
	bad.Network = sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"example.com"}}
	s.MaxSandboxes = 0
	if err := s.Create(ctx, &sandbox.Info{Name: "dom"}, bad); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("domain list: %v", err)
	}
	// Remove: a pod and policy of the sandbox (Pending here: no node)
	// go, then the record.
	req, err := RequestFor("one", recSpec())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.b.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "one", false); err != nil {
		t.Fatal(err)
	}
	if p, n := managedObjects(t, ns); p+n != 0 {
		t.Errorf("Remove left %d pods, %d policies", p, n)
	}
	if _, err := s.Get(ctx, "one"); !errors.Is(err, sandbox.ErrSandboxNotFound) {
		t.Errorf("get after remove: %v", err)
	}
	if n := len(recordSecrets(t, ns)); n != 1 {
		t.Errorf("%d records left, want 1", n)
	}
}

// TestRecordsSharedByServers: two servers of one namespace see each
// other's sandboxes and changes; a server started afresh (a restart,
// its data directory new) finds every record; a server of another
// namespace sees none of them and may use the same names.
func TestRecordsSharedByServers(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	a, b := server(t, ns), server(t, ns)
	for _, n := range []string{"alpha", "beta"} {
		if err := a.Create(ctx, &sandbox.Info{Name: n}, recSpec()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // CreatedAt orders List
	}
	l, err := b.List(ctx)
	if err != nil || len(l) != 2 || l[0].Name != "alpha" || l[1].Name != "beta" {
		t.Fatalf("b lists %v %v", l, err)
	}
	if err := b.Create(ctx, &sandbox.Info{Name: "alpha"}, recSpec()); !errors.Is(err, sandbox.ErrSandboxExists) {
		t.Errorf("b creates a's name: %v", err)
	}
	if _, err := b.Update(ctx, "alpha", func(i *sandbox.Info) error { i.Description = "by b"; return nil }); err != nil {
		t.Fatal(err)
	}
	if i, err := a.Get(ctx, "alpha"); err != nil || i.Description != "by b" || i.Status != sandbox.StatusStopped {
		t.Errorf("a reads %+v %v", i, err)
	}
	if err := b.Remove(ctx, "beta", false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Spec(ctx, "beta"); !errors.Is(err, sandbox.ErrSandboxNotFound) {
		t.Errorf("a still has beta: %v", err)
	}
	// A restart: a new Backend, a new (empty) data directory.
	c := server(t, ns)
	if l, err := c.List(ctx); err != nil || len(l) != 1 || l[0].Name != "alpha" || l[0].Description != "by b" {
		t.Errorf("after a restart: %v %v", l, err)
	}
	// Another tenant's namespace.
	other := server(t, namespace(t))
	if l, err := other.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("another namespace lists %v %v", l, err)
	}
	if _, err := other.Get(ctx, "alpha"); !errors.Is(err, sandbox.ErrSandboxNotFound) {
		t.Errorf("another namespace gets alpha: %v", err)
	}
	if err := other.Create(ctx, &sandbox.Info{Name: "alpha"}, recSpec()); err != nil {
		t.Errorf("alpha in another namespace: %v", err)
	}
}

// TestRecordsConcurrentCreate: servers creating one name at once: one
// succeeds, every other gets ErrSandboxExists. Servers creating many
// names at once under max_sandboxes never exceed it, and some get in.
func TestRecordsConcurrentCreate(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	servers := []*Sandboxes{server(t, ns), server(t, ns), server(t, ns), server(t, ns)}
	const n = 16
	var ok, exists atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := servers[i%len(servers)].Create(ctx, &sandbox.Info{Name: "same"}, recSpec())
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, sandbox.ErrSandboxExists):
				exists.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ok.Load() != 1 || exists.Load() != n-1 {
		t.Errorf("%d creates succeeded, %d found the name taken; want 1 and %d", ok.Load(), exists.Load(), n-1)
	}

	// The cap, counted in the cluster by every server.
	const max = 3
	for _, s := range servers {
		s.MaxSandboxes = max
	}
	ok.Store(0)
	var capped atomic.Int64
	start = make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := servers[i%len(servers)].Create(ctx, &sandbox.Info{Name: fmt.Sprintf("c%d", i)}, recSpec())
			switch {
			case err == nil:
				ok.Add(1)
			case strings.Contains(err.Error(), "max_sandboxes = 3"):
				capped.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	got := len(recordSecrets(t, ns))
	t.Logf("under a cap of %d (1 there before): %d of %d concurrent creates kept, %d refused; %d records", max, ok.Load(), n, capped.Load(), got)
	// Never over the cap; and a burst does not leave every creator out
	// (each one that withdrew tries again while there is room).
	if got > max || int64(got) != 1+ok.Load() || ok.Load()+capped.Load() != n || ok.Load() == 0 {
		t.Errorf("%d records, %d creates kept, %d refused", got, ok.Load(), capped.Load())
	}
	// With no race, the cap fills exactly.
	for i := 0; len(recordSecrets(t, ns)) < max; i++ {
		if err := servers[0].Create(ctx, &sandbox.Info{Name: fmt.Sprintf("d%d", i)}, recSpec()); err != nil {
			t.Fatal(err)
		}
	}
	if err := servers[1].Create(ctx, &sandbox.Info{Name: "over"}, recSpec()); err == nil || !strings.Contains(err.Error(), "already 3 sandboxes") {
		t.Errorf("create over the cap: %v", err)
	}
}

// TestRecordsUpdateConflict: another server's write between an update's
// read and its write is a conflict: the update reads again, calls its
// function again, and both changes are kept.
func TestRecordsUpdateConflict(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	a, b := server(t, ns), server(t, ns)
	if err := a.Create(ctx, &sandbox.Info{Name: "u"}, recSpec()); err != nil {
		t.Fatal(err)
	}
	calls := 0
	i, err := a.Update(ctx, "u", func(i *sandbox.Info) error {
		calls++
		if calls == 1 {
			if _, err := b.Update(ctx, "u", func(i *sandbox.Info) error { i.Description = "from b"; return nil }); err != nil {
				return err
			}
		}
		if i.Labels == nil {
			i.Labels = map[string]string{}
		}
		i.Labels["from"] = "a"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("the function ran %d times, want 2 (a conflict, then a retry)", calls)
	}
	if i.Description != "from b" || i.Labels["from"] != "a" {
		t.Errorf("after the retry: %+v", i)
	}
	if got, err := b.Get(ctx, "u"); err != nil || got.Description != "from b" || got.Labels["from"] != "a" {
		t.Errorf("b reads %+v %v", got, err)
	}
	// Many writers at once: every change is kept.
	var wg sync.WaitGroup
	for k := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := []*Sandboxes{a, b}[k%2]
			if _, err := s.Update(ctx, "u", func(i *sandbox.Info) error { i.Labels[fmt.Sprint("k", k)] = "x"; return nil }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, err := a.Get(ctx, "u"); err != nil || len(got.Labels) != 9 {
		t.Errorf("after 8 concurrent updates: %v %v", got.Labels, err)
	}
	// An error from the function writes nothing.
	boom := errors.New("boom")
	if _, err := a.Update(ctx, "u", func(i *sandbox.Info) error { i.Description = "no"; return boom }); !errors.Is(err, boom) {
		t.Errorf("update's error: %v", err)
	}
	if got, _ := b.Get(ctx, "u"); got.Description != "from b" {
		t.Errorf("a failed update wrote %q", got.Description)
	}
}

// TestRecordsHostile: names that are no DNS label are refused by every
// method before any request reaches the API server; a Secret of someone
// else's that holds a record's name is neither read as a sandbox nor
// deleted, and the name is refused as taken; a Secret labelled like a
// record but of another type is no record.
func TestRecordsHostile(t *testing.T) {
	ctx := context.Background()
	l := lab(t)
	ns := namespace(t)
	var calls atomic.Int64
	b, err := NewForConfig(countingConfig(restConfig(l, l.AdminToken), &calls), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	s := NewSandboxes(b, t.TempDir())
	s.MaxSandboxes = 5
	for _, n := range []string{"", "A", "a_b", "../x", "a/b", "a b", "-a", "a-", "a.b", "x;rm -rf /", "é", "a\x00b", "sandbox\n", strings.Repeat("a", MaxNameLen+1), "kube-system/x", "..", "."} {
		if err := s.Create(ctx, &sandbox.Info{Name: n}, recSpec()); err == nil {
			t.Errorf("Create(%q) accepted", n)
		}
		if _, err := s.Get(ctx, n); !errors.Is(err, sandbox.ErrSandboxNotFound) {
			t.Errorf("Get(%q): %v", n, err)
		}
		if _, err := s.Spec(ctx, n); !errors.Is(err, sandbox.ErrSandboxNotFound) {
			t.Errorf("Spec(%q): %v", n, err)
		}
		if _, err := s.Update(ctx, n, func(*sandbox.Info) error { return nil }); !errors.Is(err, sandbox.ErrSandboxNotFound) {
			t.Errorf("Update(%q): %v", n, err)
		}
		if err := s.Remove(ctx, n, true); !errors.Is(err, sandbox.ErrSandboxNotFound) {
			t.Errorf("Remove(%q): %v", n, err)
		}
		if _, err := s.Start(ctx, n); !errors.Is(err, sandbox.ErrSandboxNotFound) {
			t.Errorf("Start(%q): %v", n, err)
		}
		if _, err := s.Stop(ctx, n, "x"); !errors.Is(err, sandbox.ErrSandboxNotFound) {
			t.Errorf("Stop(%q): %v", n, err)
		}
		if _, err := s.Connect(ctx, n); !errors.Is(err, sandbox.ErrSandboxNotFound) {
			t.Errorf("Connect(%q): %v", n, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d API requests for refused names", n)
	}

	cs := admin(t)
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: RecordName("taken")}, StringData: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Labelled like a record, of another type.
	forged := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: RecordName("forged"), Labels: map[string]string{ManagedLabel: ManagedValue, SandboxLabel: "forged"}},
		Data: map[string][]byte{recordKey: []byte(`{"info":{"name":"forged"},"spec":{}}`)}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = s.Create(ctx, &sandbox.Info{Name: "taken"}, recSpec())
	if !errors.Is(err, sandbox.ErrSandboxExists) || !strings.Contains(err.Error(), "not made by agentkernel") {
		t.Errorf("create over someone's Secret: %v", err)
	}
	for _, n := range []string{"taken", "forged"} {
		if _, err := s.Get(ctx, n); !errors.Is(err, sandbox.ErrSandboxNotFound) {
			t.Errorf("Get(%s): %v", n, err)
		}
		if err := s.Remove(ctx, n, true); !errors.Is(err, sandbox.ErrSandboxNotFound) {
			t.Errorf("Remove(%s): %v", n, err)
		}
	}
	if l, err := s.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("List: %v %v", l, err)
	}
	for _, n := range []string{"taken", "forged"} {
		if _, err := cs.CoreV1().Secrets(ns).Get(ctx, RecordName(n), metav1.GetOptions{}); err != nil {
			t.Errorf("someone's Secret %s: %v", n, err)
		}
	}
	// Neither counts against max_sandboxes.
	s.MaxSandboxes = 1
	if err := s.Create(ctx, &sandbox.Info{Name: "mine"}, recSpec()); err != nil {
		t.Errorf("create under the cap: %v", err)
	}
}

// TestRecordsMigrateLocal: records kept as files by an earlier version
// move into the cluster once, with their ids; the files are kept aside;
// a file whose name is another sandbox's in the cluster, and one that
// cannot be read, stay where they are.
func TestRecordsMigrateLocal(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	dataDir := t.TempDir()
	s := NewSandboxes(backend(t, Options{Namespace: ns}), dataDir)
	dir := filepath.Join(dataDir, "kubernetes", ns)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, uuid string) {
		b, _ := json.Marshal(record{Info: &sandbox.Info{Name: name, UUID: uuid, Backend: BackendName, Status: sandbox.StatusRunning, Description: "old " + name}, Spec: recSpec()})
		if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("old-a", "uuid-a")
	write("old-b", "uuid-b")
	write("clash", "uuid-mine")
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Bad_Name.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := server(t, ns)
	if err := other.Create(ctx, &sandbox.Info{Name: "clash"}, recSpec()); err != nil {
		t.Fatal(err)
	}
	moved, kept, err := s.MigrateLocal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("moved %q, kept %q", moved, kept)
	if len(moved) != 2 || len(kept) != 3 {
		t.Errorf("moved %d, kept %d; want 2 and 3", len(moved), len(kept))
	}
	for _, n := range []string{"old-a", "old-b"} {
		i, err := other.Get(ctx, n)
		if err != nil || i.UUID != "uuid-"+n[len(n)-1:] || i.Description != "old "+n || i.Status != sandbox.StatusStopped || i.StopReason != "its pod is gone" {
			t.Errorf("%s in the cluster: %+v %v", n, i, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "migrated", n+".json")); err != nil {
			t.Errorf("%s's file not kept: %v", n, err)
		}
		if _, err := os.Stat(filepath.Join(dir, n+".json")); err == nil {
			t.Errorf("%s's file still in place", n)
		}
	}
	for _, f := range []string{"clash.json", "broken.json", "Bad_Name.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s was not left in place: %v", f, err)
		}
	}
	if i, err := other.Get(ctx, "clash"); err != nil || i.UUID == "uuid-mine" {
		t.Errorf("the cluster's clash was replaced: %+v %v", i, err)
	}
	// Once: a second start moves nothing more, and says the same of the
	// files left.
	moved, kept, err = s.MigrateLocal(ctx)
	if err != nil || len(moved) != 0 || len(kept) != 3 {
		t.Errorf("second migration: moved %q, kept %q, %v", moved, kept, err)
	}
	// A copy already in the cluster (a migration cut short before its
	// move): the file is moved, nothing is made twice.
	write("old-a", "uuid-a")
	if moved, _, err := s.MigrateLocal(ctx); err != nil || len(moved) != 1 {
		t.Errorf("migration of a record already there: %q %v", moved, err)
	}
	if n := len(recordSecrets(t, ns)); n != 3 {
		t.Errorf("%d records, want 3", n)
	}
}

// chartRole is the rules of the Helm chart's Role
// (deploy/helm/agentkernel/templates/rbac.yaml; its rules are plain YAML,
// no template in them).
func chartRole(t testing.TB) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile("../../../deploy/helm/agentkernel/templates/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, rules, ok := strings.Cut(string(b), "\nrules:\n")
	if !ok {
		t.Fatal("no rules in the chart's Role")
	}
	rules, _, _ = strings.Cut(rules, "\n---")
	var doc struct {
		Rules []struct {
			APIGroups []string `yaml:"apiGroups"`
			Resources []string `yaml:"resources"`
			Verbs     []string `yaml:"verbs"`
		} `yaml:"rules"`
	}
	if err := yaml.Unmarshal([]byte("rules:\n"+rules), &doc); err != nil || len(doc.Rules) == 0 {
		t.Fatalf("the chart's Role: %v", err)
	}
	var out []rbacv1.PolicyRule
	for _, r := range doc.Rules {
		out = append(out, rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, Verbs: r.Verbs})
	}
	return out
}

// TestRecordsChartRole: the Role the Helm chart grants is enough for
// the records (create, list, get, update, the cap's count, remove after
// the pod and policy) with nothing else: its rules bound to a user that
// has no other right, in a namespace of the test's; that user still
// reaches nothing of another namespace.
func TestRecordsChartRole(t *testing.T) {
	ctx := context.Background()
	l := lab(t)
	ns := namespace(t)
	cs := admin(t)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "agentkernel"}, Rules: chartRole(t)}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agentkernel"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agentkernel"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "nobody"}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := NewForConfig(restConfig(l, l.UserToken), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	s := NewSandboxes(b, t.TempDir())
	s.MaxSandboxes = 2
	// The binding takes a moment to reach the authorizer's cache.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.List(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list with the chart's Role: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.Create(ctx, &sandbox.Info{Name: "r"}, recSpec()); err != nil {
		t.Fatalf("create with the chart's Role: %v", err)
	}
	if _, err := s.Update(ctx, "r", func(i *sandbox.Info) error { i.Description = "x"; return nil }); err != nil {
		t.Errorf("update with the chart's Role: %v", err)
	}
	if i, err := s.Get(ctx, "r"); err != nil || i.Description != "x" {
		t.Errorf("get with the chart's Role: %+v %v", i, err)
	}
	req, err := RequestFor("r", recSpec())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, req); err != nil {
		t.Fatalf("pod with the chart's Role: %v", err)
	}
	if l, err := s.List(ctx); err != nil || len(l) != 1 {
		t.Errorf("list with the chart's Role: %v %v", l, err)
	}
	if err := s.Remove(ctx, "r", true); err != nil {
		t.Errorf("remove with the chart's Role: %v", err)
	}
	if p, n := managedObjects(t, ns); p+n != 0 || len(recordSecrets(t, ns)) != 0 {
		t.Errorf("left %d pods, %d policies, %d records", p, n, len(recordSecrets(t, ns)))
	}
	// The Role is the namespace's only.
	elsewhere, err := NewForConfig(restConfig(l, l.UserToken), Options{Namespace: namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSandboxes(elsewhere, t.TempDir()).List(ctx); err == nil || !strings.Contains(err.Error(), "forbidden (403)") {
		t.Errorf("another namespace with the chart's Role: %v", err)
	}
}

// TestRecordsStartClaim: while another server's start claim holds a
// sandbox, Start makes no pod and waits; once the claim is gone (here it
// lapses) it starts the sandbox itself; a failed start gives its claim
// back, and Stop clears one.
func TestRecordsStartClaim(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	a, b := server(t, ns), server(t, ns)
	if err := a.Create(ctx, &sandbox.Info{Name: "s"}, recSpec()); err != nil {
		t.Fatal(err)
	}
	claim := func(until time.Time) {
		t.Helper()
		if _, err := a.modify(ctx, "s", func(r *record) error { r.Starting = &startClaim{By: "another-server", Until: until}; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	const hold = 1500 * time.Millisecond
	claim(time.Now().Add(hold))
	b.StartTimeout = 500 * time.Millisecond // no node here: the pod never runs
	began := time.Now()
	done := make(chan error, 1)
	go func() { _, err := b.Start(ctx, "s"); done <- err }()
	for time.Since(began) < hold-300*time.Millisecond {
		if p, _ := managedObjects(t, ns); p != 0 {
			t.Fatalf("a pod was made %v into another server's start", time.Since(began))
		}
		time.Sleep(50 * time.Millisecond)
	}
	err := <-done
	if took := time.Since(began); err == nil || took < hold {
		t.Errorf("start under a claim: %v after %v (want a timeout of its own, after %v)", err, took, hold)
	}
	r, _, lerr := a.load(ctx, "s")
	if lerr != nil || r.Starting != nil {
		t.Errorf("claim after a failed start: %+v %v", r, lerr)
	}
	if p, n := managedObjects(t, ns); p+n != 0 {
		t.Errorf("a failed start left %d pods, %d policies", p, n)
	}
	claim(time.Now().Add(time.Hour))
	if _, err := b.Stop(ctx, "s", "stopped by user"); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := a.load(ctx, "s"); r.Starting != nil {
		t.Errorf("claim after stop: %+v", r.Starting)
	}
}
