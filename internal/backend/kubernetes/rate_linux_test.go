package kubernetes

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkCreateObjects measures sandboxes created per second through
// the API server (the objects Create makes: a NetworkPolicy, then a pod;
// nothing starts, the test API server has no node) against plain
// creation of the same pod through the same client, with 1 and 8
// clients at once. Each sub-benchmark reports objects/s (sandboxes or
// pods per second of the whole batch); the namespace is emptied between
// batches, outside the timer, so every batch starts from the same store.
//
//	go test -run '^$' -bench BenchmarkCreateObjects -benchtime 40x ./internal/backend/kubernetes
func BenchmarkCreateObjects(b *testing.B) {
	ctx := context.Background()
	be := backend(b, Options{})
	p := mustProfile(b, "moderate")
	batch := 0
	clean := func(b *testing.B) {
		if err := be.client.CoreV1().Pods(be.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := be.client.NetworkingV1().NetworkPolicies(be.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("Sandbox/clients=%d", clients), func(b *testing.B) {
			batch++
			prefix := fmt.Sprintf("s%d-%d", clients, batch)
			rate := parallelRate(b, clients, func(i int) error {
				_, err := be.Create(ctx, &Request{Name: fmt.Sprintf("%s-%d", prefix, i), Image: "busybox", Profile: p})
				return err
			})
			b.ReportMetric(rate, "objects/s")
			clean(b)
		})
		b.Run(fmt.Sprintf("PlainPod/clients=%d", clients), func(b *testing.B) {
			batch++
			prefix := fmt.Sprintf("p%d-%d", clients, batch)
			rate := parallelRate(b, clients, func(i int) error {
				pod := buildPod(be.podOptions(), &Request{Name: fmt.Sprintf("%s-%d", prefix, i), Image: "busybox", Profile: p}, time.Now())
				_, err := be.client.CoreV1().Pods(be.ns).Create(ctx, pod, metav1.CreateOptions{})
				return err
			})
			b.ReportMetric(rate, "objects/s")
			clean(b)
		})
	}
}

// parallelRate runs f for 0..b.N-1 over workers goroutines, under the
// benchmark's timer, and returns the calls per second; the first error
// fails the benchmark.
func parallelRate(b *testing.B, workers int, f func(i int) error) float64 {
	b.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	b.ResetTimer()
	start := time.Now()
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
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	took := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return float64(b.N) / took.Seconds()
}
