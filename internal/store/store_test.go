package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestCreateGetUpdateDelete(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	sb := &Sandbox{Name: "a1", Image: "alpine:3.20", Backend: "native", Labels: map[string]string{"team": "x"}, ExpiresAt: &exp}
	if err := s.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if len(sb.UUID) != 36 || sb.UUID[14] != '7' {
		t.Fatalf("uuid %q is not a v7", sb.UUID)
	}
	if err := s.Create(ctx, &Sandbox{Name: "a1", Image: "x", Backend: "native"}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	got, err := s.Get(ctx, "a1")
	if err != nil || got.Labels["team"] != "x" || got.Status != StatusStopped || !got.ExpiresAt.Equal(exp) {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := s.Update(ctx, "a1", func(sb *Sandbox) error { sb.Status = StatusRunning; sb.SupervisorPID = 42; return nil }); err != nil {
		t.Fatal(err)
	}
	// A second process sees the change.
	s2, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, _ := s2.Get(ctx, "a1"); got.Status != StatusRunning || got.SupervisorPID != 42 {
		t.Fatalf("second handle: %+v", got)
	}
	if err := s.Delete(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s, err := Open(ctx, dir)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			for i := 0; i < 10; i++ {
				if err := s.Create(ctx, &Sandbox{Name: fmt.Sprintf("w%d-%d", w, i), Image: "i", Backend: "native"}); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s, _ := Open(ctx, dir)
	defer s.Close()
	all, err := s.List(ctx)
	if err != nil || len(all) != 40 {
		t.Fatalf("list: %d %v", len(all), err)
	}
}
