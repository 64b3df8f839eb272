package kubernetes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCreateRate measures sandboxes created per second (API objects: a
// NetworkPolicy and a pod each, as Create makes them) against plain pod
// creation of the same pod through the same client, in alternating
// rounds, and prints the medians. Only with AGENTKERNEL_KUBE_BENCH=1
// (AGENTKERNEL_KUBE_BENCH_N sandboxes per round, default 40): it is a
// measurement, not a check.
func TestCreateRate(t *testing.T) {
	if os.Getenv("AGENTKERNEL_KUBE_BENCH") != "1" {
		t.Skip("a measurement: set AGENTKERNEL_KUBE_BENCH=1")
	}
	n := 40
	if v, err := strconv.Atoi(os.Getenv("AGENTKERNEL_KUBE_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	b := backend(t, Options{})
	p := mustProfile(t, "moderate")
	const rounds = 5
	for _, workers := range []int{1, 8} {
		var sb, plain []float64
		for round := range rounds {
			// Sandboxes: Create (policy, then pod).
			d := timeParallel(t, n, workers, func(i int) error {
				_, err := b.Create(ctx, &Request{Name: fmt.Sprintf("s%d-%d-%d", workers, round, i), Image: "busybox", Profile: p})
				return err
			})
			sb = append(sb, float64(n)/d.Seconds())
			// Plain pods: the same pod object, one request each.
			d = timeParallel(t, n, workers, func(i int) error {
				pod := buildPod(b.podOptions(), &Request{Name: fmt.Sprintf("p%d-%d-%d", workers, round, i), Image: "busybox", Profile: p}, time.Now())
				_, err := b.client.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{})
				return err
			})
			plain = append(plain, float64(n)/d.Seconds())
			// Clean up between rounds so that every round starts from the
			// same store size.
			if err := b.client.CoreV1().Pods(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := b.client.NetworkingV1().NetworkPolicies(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%d client(s), %d per round, %d rounds: sandboxes/s median %.1f (rounds %s); plain pods/s median %.1f (rounds %s)",
			workers, n, rounds, median(sb), fmtRates(sb), median(plain), fmtRates(plain))
	}
}

func timeParallel(t *testing.T, n, workers int, f func(i int) error) time.Duration {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	var firstErr error
	var mu sync.Mutex
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return time.Since(start)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func fmtRates(v []float64) string {
	out := ""
	for i, x := range v {
		if i > 0 {
			out += " "
		}
		out += strconv.FormatFloat(x, 'f', 1, 64)
	}
	return out
}
