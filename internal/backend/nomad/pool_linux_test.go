//go:build linux

package nomad

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestPool runs a warm pool on a real dev agent with the agentkernel
// driver: Fill, a sandbox taken from it (it answers at once, under its
// own name, its files its own), the name claimed as every sandbox's is,
// a request of another spec not served from it, concurrent takers never
// sharing a job, Remove, a forged name job refused, and the leftovers
// (a claim cut short, the jobs of an owner whose lease lapsed) reaped
// while a taken sandbox is kept.
func TestPool(t *testing.T) {
	l := startLab(t)
	ak := buildAgentkernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var skew atomic.Int64
	nodeData := nodeDataDir(t, ak)
	b := newBackend(t, l, Options{NodeAgentkernel: ak, NodeDataDir: nodeData,
		Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	p := &Pool{Name: "warm", Request: Request{Image: "host", Network: NetworkNone}, Size: 3, Owner: "test-server"}
	t.Cleanup(func() { _ = b.Drain(context.Background(), p) })
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	if err := b.KeepLease(lctx, p.Owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Fill(ctx, p); err != nil || n != 3 {
		t.Fatalf("fill: %d %v", n, err)
	}
	if n, err := b.Fill(ctx, p); err != nil || n != 0 {
		t.Fatalf("second fill: %d %v", n, err)
	}
	if err := b.WaitPool(ctx, p, 3, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if list, err := b.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("pool jobs listed as sandboxes: %+v %v", list, err)
	}

	// Taken: it answers at once, under its name.
	for _, n := range []string{"w1", "c0", "c1", "c2", "c3", "c4", "c5"} {
		cleanupJob(t, b, n)
	}
	start := time.Now()
	s, adopted, err := b.CreateFromPool(ctx, p, &Request{Name: "w1", Image: "host", Network: NetworkNone, Labels: map[string]string{"team": "ml"}, TTL: time.Hour})
	if err != nil || !adopted || s.Name != "w1" {
		t.Fatalf("create from pool: %+v %v %v", s, adopted, err)
	}
	if _, err := b.Ready(ctx, "w1", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("taken and answering in %v", time.Since(start))
	if err := b.WriteFile(ctx, "w1", "/tmp/mine", []byte("w1's")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ReadFile(ctx, "w1", "/tmp/mine", 100); err != nil || string(got) != "w1's" {
		t.Fatalf("read back %q %v", got, err)
	}
	g, err := b.Get(ctx, "w1")
	if err != nil || g.Status != "running" || g.Labels["team"] != "ml" || g.ExpiresAt.IsZero() {
		t.Fatalf("get: %+v %v", g, err)
	}
	if list, err := b.List(ctx); err != nil || len(list) != 1 || list[0].Name != "w1" || list[0].Status != "running" {
		t.Fatalf("list: %+v %v", list, err)
	}
	// Where the pool job's name shows: the node's agentkernel knows the
	// sandbox as pool-HEX (its list and audit log), and Get says so;
	// inside, the host name is the one every sandbox gets.
	if !strings.HasPrefix(g.NodeName, "pool-") || g.TaskJobID != "agentkernel."+g.NodeName || g.JobID != "agentkernel-w1" {
		t.Fatalf("get: node name %q, task job %q, job %q", g.NodeName, g.TaskJobID, g.JobID)
	}
	var host bytes.Buffer
	if code, err := b.Exec(ctx, "w1", []string{"hostname"}, nil, &host, nil); err != nil || code != 0 || host.String() != "agentkernel\n" {
		t.Fatalf("hostname in a pooled sandbox: %q %d %v", host.String(), code, err)
	}
	if out, err := exec.Command(ak, "--data-dir", nodeData, "-q", "sandbox", "list").Output(); err != nil || !strings.Contains(string(out), g.NodeName+" ") || strings.Contains(string(out), "w1") {
		t.Fatalf("the node's sandbox list: %s %v", out, err)
	}
	if out, err := exec.Command(ak, "--data-dir", nodeData, "audit", "--sandbox", g.NodeName).Output(); err != nil || !strings.Contains(string(out), "hostname") {
		t.Fatalf("the node's audit log of %s: %s %v", g.NodeName, out, err)
	}
	if n, _ := b.Waiting(ctx, p); n != 2 {
		t.Fatalf("waiting after a take: %d, want 2", n)
	}

	// The name is claimed as any sandbox's: taken, and the pool keeps
	// its job.
	if _, _, err := b.CreateFromPool(ctx, p, &Request{Name: "w1", Image: "host", Network: NetworkNone}); !errors.Is(err, ErrExists) {
		t.Fatalf("second create of w1: %v, want ErrExists", err)
	}
	if _, err := b.Create(ctx, &Request{Name: "w1"}); !errors.Is(err, ErrExists) {
		t.Fatalf("cold create of a pooled name: %v, want ErrExists", err)
	}
	if n, _ := b.Waiting(ctx, p); n != 2 {
		t.Fatalf("waiting after a refused take: %d, want 2", n)
	}
	// Another spec is never served from the pool.
	if b.Matches(p, &Request{Name: "x", Image: "host", Network: NetworkNone, MemoryMB: 128}) ||
		b.Matches(p, &Request{Name: "x", Image: "host", Network: NetworkFull}) ||
		b.Matches(p, &Request{Name: "x", Image: "host", Network: NetworkNone, Profile: "restrictive"}) {
		t.Fatal("a request of another spec matches the pool")
	}

	// Concurrent takers: two jobs wait, six take at once.
	var (
		mu    sync.Mutex
		taken = map[string]string{}
		empty int
		wg    sync.WaitGroup
	)
	for _, n := range []string{"c0", "c1", "c2", "c3", "c4", "c5"} {
		wg.Go(func() {
			_, err := b.adopt(ctx, p, &Request{Name: n, Image: "host", Network: NetworkNone})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrPoolEmpty):
				empty++
			case err != nil:
				t.Errorf("take %s: %v", n, err)
			default:
				id, _, _, err := b.target(ctx, n)
				if err != nil {
					t.Errorf("target %s: %v", n, err)
				}
				taken[n] = id
			}
		})
	}
	wg.Wait()
	jobs := map[string]bool{}
	for _, id := range taken {
		jobs[id] = true
	}
	if len(taken) != 2 || empty != 4 || len(jobs) != 2 {
		t.Fatalf("concurrent takes: %v taken, %d found the pool empty", taken, empty)
	}
	for n := range taken {
		var out bytes.Buffer
		if code, err := b.Exec(ctx, n, []string{"cat", "/tmp/mine"}, nil, &out, nil); err != nil || code == 0 {
			t.Fatalf("%s sees w1's file: %d %v %q", n, code, err, out.String())
		}
	}

	// Remove: the pool job, the name and the claim go.
	id, _, _, err := b.target(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "w1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after remove: %v", err)
	}
	if j, _, err := b.client.Jobs().Info(id, nil); err == nil && (j.Stop == nil || !*j.Stop) {
		t.Fatalf("pool job %s still runs after remove", id)
	}
	if v, _, _ := b.client.Variables().Peek(claimVarPrefix+poolHex(id), nil); v != nil {
		t.Fatal("claim left after remove")
	}

	// A forged name job pointing at a job not of a pool is refused, and
	// that job is left alone.
	victim := "victim"
	cleanupJob(t, b, victim)
	vj := buildJob(b.jobOptions(), &Request{Name: victim}, time.Now())
	vj.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "/bin/sleep", "args": []string{"600"}}
	if _, _, err := b.client.Jobs().Register(vj, nil); err != nil {
		t.Fatal(err)
	}
	forged := b.nameJob(&Request{Name: "forged"}, JobID(victim), victim)
	cleanupJob(t, b, "forged")
	if _, _, err := b.client.Jobs().Register(forged, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "forged", []string{"true"}, nil, nil, nil); err == nil {
		t.Fatal("exec through a forged name job succeeded")
	}
	if err := b.Remove(ctx, "forged"); err == nil {
		t.Fatal("remove through a forged name job succeeded")
	}
	if _, _, err := b.client.Jobs().Info(JobID(victim), nil); err != nil {
		t.Fatalf("the forged name job's target was touched: %v", err)
	}

	// Leftovers. One job waits; claim it for a sandbox that never gets
	// its name (a creation cut short).
	w, err := b.waiting(ctx, p, false)
	if err != nil || len(w) != 0 {
		t.Fatalf("waiting: %d %v", len(w), err)
	}
	if _, err := b.Fill(ctx, p); err != nil {
		t.Fatal(err)
	}
	// (Answering first: a job stopped while its node still makes the
	// sandbox would race the test's removal of the node's directory.)
	if err := b.WaitPool(ctx, p, 3, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	w, _ = b.waiting(ctx, p, false)
	if len(w) != 3 {
		t.Fatalf("refilled: %d waiting", len(w))
	}
	if _, err := b.claim(ctx, w[0].ID, "ghost"); err != nil {
		t.Fatal(err)
	}
	// The owner lives and the claim is fresh: nothing is reaped.
	if gone, err := b.ReapPools(ctx); err != nil || len(gone) != 0 {
		t.Fatalf("reaped while the owner lives: %v %v", gone, err)
	}
	// Two minutes on: the cut claim is old, the lease has lapsed.
	lcancel()
	skew.Store(int64(2 * time.Minute))
	gone, err := b.ReapPools(ctx)
	if err != nil || len(gone) != 3 {
		t.Fatalf("reaped %v %v, want the 3 waiting jobs (one of them the cut claim's)", gone, err)
	}
	if n, _ := b.Waiting(ctx, p); n != 0 {
		t.Fatalf("waiting after the reap: %d", n)
	}
	for n := range taken {
		if code, err := b.Exec(ctx, n, []string{"true"}, nil, nil, nil); err != nil || code != 0 {
			t.Fatalf("taken sandbox %s reaped: %d %v", n, code, err)
		}
		if err := b.Remove(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMetaUpdateReplacesTask is why a pool's job is claimed with a
// Nomad Variable and not by writing the sandbox's name into the job's
// meta: on the Nomad the tests run, a new job version whose only change
// is its meta replaces the running allocation (meta reaches the task's
// environment as NOMAD_META_*), which would end the pooled sandbox.
func TestMetaUpdateReplacesTask(t *testing.T) {
	l := startLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := newBackend(t, l, Options{})
	name := "meta-probe"
	cleanupJob(t, b, name)
	job := buildJob(b.jobOptions(), &Request{Name: name}, time.Now())
	job.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "/bin/sleep", "args": []string{"600"}}
	if _, _, err := b.client.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	first, err := b.Wait(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cur, _, err := b.client.Jobs().Info(JobID(name), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The control: the same job registered again leaves it running.
	if _, _, err := b.client.Jobs().RegisterOpts(cur, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: *cur.JobModifyIndex}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if a, _, err := b.client.Allocations().Info(first, nil); err != nil || a.DesiredStatus != api.AllocDesiredStatusRun || a.ClientStatus != api.AllocClientStatusRunning {
		t.Fatalf("registering the unchanged job again disturbed its allocation: %v %+v", err, a)
	}
	if cur, _, err = b.client.Jobs().Info(JobID(name), nil); err != nil {
		t.Fatal(err)
	}
	cur.Meta["agentkernel.probe"] = "claimed"
	if _, _, err := b.client.Jobs().RegisterOpts(cur, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: *cur.JobModifyIndex}, nil); err != nil {
		t.Fatal(err)
	}
	// The first allocation is stopped and another placed.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		a, _, err := b.client.Allocations().Info(first, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.DesiredStatus != api.AllocDesiredStatusRun || a.ClientStatus != api.AllocClientStatusRunning {
			t.Logf("a meta update stopped the running allocation (desired %s, client %s)", a.DesiredStatus, a.ClientStatus)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("a meta update left the allocation running: claiming by meta would be possible on this Nomad")
}

// TestPoolForgedJobNotTaken: a job dressed as a pool's waiting job (its
// meta says the pool and the spec's digest) that runs something else is
// never taken: the taker checks the job itself, gives the claim back and
// finds the pool empty; no name job is left.
func TestPoolForgedJobNotTaken(t *testing.T) {
	l := startLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := newBackend(t, l, Options{})
	p := &Pool{Name: "forged", Request: Request{Image: "host", Network: NetworkNone}, Size: 1}
	job := b.poolJob(p, "00112233445566ff")
	job.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "/bin/sleep", "args": []string{"600"}}
	if _, _, err := b.client.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = b.client.Jobs().Deregister(*job.ID, true, nil) })
	if n, err := b.Waiting(ctx, p); err != nil || n != 1 {
		t.Fatalf("the forged job does not look waiting: %d %v", n, err)
	}
	cleanupJob(t, b, "victim")
	if _, err := b.adopt(ctx, p, &Request{Name: "victim", Image: "host", Network: NetworkNone}); !errors.Is(err, ErrPoolEmpty) {
		t.Fatalf("take: %v, want ErrPoolEmpty", err)
	}
	if _, _, err := b.client.Jobs().Info(JobID("victim"), nil); err == nil || !isNotFound(err) {
		t.Fatalf("a name job was left: %v", err)
	}
	if v, _, _ := b.client.Variables().Peek(claimVarPrefix+"00112233445566ff", nil); v != nil {
		t.Fatal("the claim was kept")
	}
}
