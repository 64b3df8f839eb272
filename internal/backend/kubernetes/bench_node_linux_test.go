package kubernetes

import (
	"context"
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
)

// These benchmarks time starts on the lab's real node (containerd,
// runc, a kubelet and a scheduler), each measured the same way: from
// the create call until the pod is Running as a watch on the API server
// reports it ("running"), and for sandboxes until a first exec of true
// has returned ("first-exec"). The plain pod is the baseline: one
// container of the same image running sleep, no policy, nothing else.
//
//	CGO_ENABLED=0 go test -p 1 ./internal/backend/kubernetes -run '^$' \
//	    -bench BenchmarkNode -benchtime 10x
//
// Each reports the median and the p90 of its b.N starts besides the
// mean Go prints.

// waitSelectorRunning watches the pods matching sel until one is
// Running.
func waitSelectorRunning(ctx context.Context, b *Backend, sel string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		list, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				return nil
			}
		}
		w, err := b.client.CoreV1().Pods(b.ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// medians records durations and reports their median.
type medians map[string][]time.Duration

func (m medians) report(b *testing.B) {
	for k, v := range m {
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		b.ReportMetric(float64(v[len(v)/2].Microseconds())/1000, k+"-median-ms")
		b.ReportMetric(float64(v[len(v)*9/10].Microseconds())/1000, k+"-p90-ms")
	}
}

func benchExecTrue(ctx context.Context, b *Backend, name string) error {
	code, err := b.Exec(ctx, name, []string{"true"}, ExecIO{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil && code != 0 {
		err = fmt.Errorf("true exited %d", code)
	}
	return err
}

func benchRemove(tb testing.TB, b *Backend, name string) {
	tb.Helper()
	if err := b.Remove(context.Background(), name); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkNodePlainPod: the baseline, a plain pod created → Running.
func BenchmarkNodePlainPod(bb *testing.B) {
	b := nodeBackend(bb, Options{NoUserNamespace: true})
	ctx := context.Background()
	m := medians{}
	for i := 0; i < bb.N; i++ {
		name := fmt.Sprintf("plain-%d", i)
		f := false
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": name}},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken:  &f,
				TerminationGracePeriodSeconds: new(int64),
				Containers:                    []corev1.Container{{Name: "main", Image: kubelab.TestImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "infinity"}}},
			},
		}
		start := time.Now()
		if _, err := b.client.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			bb.Fatal(err)
		}
		if err := waitSelectorRunning(ctx, b, labels.Set{"bench": name}.String()); err != nil {
			bb.Fatal(err)
		}
		m["running"] = append(m["running"], time.Since(start))
		bb.StopTimer()
		zero := int64(0)
		_ = b.client.CoreV1().Pods(b.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		bb.StartTimer()
	}
	m.report(bb)
}

// BenchmarkNodeColdSandbox: a sandbox with a pod of its own, created →
// Running → first exec returned.
func BenchmarkNodeColdSandbox(bb *testing.B) {
	b := nodeBackend(bb, Options{NoUserNamespace: true})
	ctx := context.Background()
	prof := mustProfile(bb, "moderate")
	m := medians{}
	for i := 0; i < bb.N; i++ {
		name := fmt.Sprintf("cold-%d", i)
		start := time.Now()
		s, err := b.Create(ctx, &Request{Name: name, Image: kubelab.TestImage, Profile: prof})
		if err != nil {
			bb.Fatal(err)
		}
		measureStart(ctx, bb, b, s, start, m)
	}
	m.report(bb)
}

// BenchmarkNodePooledSandbox: a sandbox adopting a pool's Running pod,
// taken → Running → first exec returned. The pool is refilled, and its
// new pod waited for, outside the timer.
func BenchmarkNodePooledSandbox(bb *testing.B) {
	b := nodeBackend(bb, Options{NoUserNamespace: true})
	ctx := context.Background()
	p := &Pool{Name: "bench", Image: kubelab.TestImage, Profile: mustProfile(bb, "moderate"), Size: 1}
	defer func() { _ = b.Drain(context.Background(), p.Name) }()
	m := medians{}
	for i := 0; i < bb.N; i++ {
		bb.StopTimer()
		if _, err := b.Fill(ctx, p); err != nil {
			bb.Fatal(err)
		}
		if err := waitSelectorRunning(ctx, b, poolSelector(p.Name)); err != nil {
			bb.Fatal(err)
		}
		name := fmt.Sprintf("pooled-%d", i)
		bb.StartTimer()
		start := time.Now()
		s, adopted, err := b.CreateFromPool(ctx, p, &Request{Name: name, Image: p.Image, Profile: p.Profile})
		if err != nil || !adopted {
			bb.Fatalf("adopt: %v %v", adopted, err)
		}
		measureStart(ctx, bb, b, s, start, m)
	}
	m.report(bb)
}

// measureStart records the times from start to sandbox s's Running and
// to its first exec returned, then removes it outside the timer. It
// goes as `agentkernel kube run` does: a pod the create returned
// Running (adopted from a pool) is not waited for, and the exec goes to
// the pod the create or the wait returned.
func measureStart(ctx context.Context, bb *testing.B, b *Backend, s *Sandbox, start time.Time, m medians) {
	bb.Helper()
	if s.Phase != corev1.PodRunning {
		var err error
		if s, err = b.WaitRunning(ctx, s.Name, 2*time.Minute); err != nil {
			bb.Fatal(err)
		}
	}
	m["running"] = append(m["running"], time.Since(start))
	code, err := b.ExecIn(ctx, s, []string{"true"}, ExecIO{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil || code != 0 {
		bb.Fatalf("first exec: %d %v", code, err)
	}
	m["first-exec"] = append(m["first-exec"], time.Since(start))
	bb.StopTimer()
	benchRemove(bb, b, s.Name)
	bb.StartTimer()
}

// BenchmarkNodeConnExec: a command (true) as the server runs one in a
// persistent sandbox: a connection opened (its record and pod read),
// the command run through it.
func BenchmarkNodeConnExec(bb *testing.B) {
	b := nodeBackend(bb, Options{NoUserNamespace: true})
	ctx := context.Background()
	s := NewSandboxes(b, bb.TempDir())
	info := &sandbox.Info{Name: "cexec"}
	if err := s.Create(ctx, info, &sandbox.Spec{Image: kubelab.TestImage, Profile: "moderate"}); err != nil {
		bb.Fatal(err)
	}
	if _, err := s.Start(ctx, "cexec"); err != nil {
		bb.Fatal(err)
	}
	defer func() {
		if err := s.Remove(context.Background(), "cexec", true); err != nil {
			bb.Error(err)
		}
	}()
	m := medians{}
	bb.ResetTimer()
	for i := 0; i < bb.N; i++ {
		start := time.Now()
		c, err := s.Connect(ctx, "cexec")
		if err != nil {
			bb.Fatal(err)
		}
		res, err := c.Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}}, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard}, nil)
		if err != nil || res.ExitCode != 0 {
			bb.Fatalf("exec: %+v %v", res, err)
		}
		_ = c.Close()
		m["conn-exec"] = append(m["conn-exec"], time.Since(start))
	}
	bb.StopTimer()
	m.report(bb)
}

// BenchmarkNodeExec: an exec round trip (true) into a Running sandbox.
func BenchmarkNodeExec(bb *testing.B) {
	b := nodeBackend(bb, Options{NoUserNamespace: true})
	ctx := context.Background()
	if _, err := b.Create(ctx, &Request{Name: "exec", Image: kubelab.TestImage, Profile: mustProfile(bb, "moderate")}); err != nil {
		bb.Fatal(err)
	}
	defer benchRemove(bb, b, "exec")
	if _, err := b.WaitRunning(ctx, "exec", 2*time.Minute); err != nil {
		bb.Fatal(err)
	}
	m := medians{}
	bb.ResetTimer()
	for i := 0; i < bb.N; i++ {
		start := time.Now()
		if err := benchExecTrue(ctx, b, "exec"); err != nil {
			bb.Fatal(err)
		}
		m["exec"] = append(m["exec"], time.Since(start))
	}
	bb.StopTimer()
	m.report(bb)
}
