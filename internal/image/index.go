package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/image/cache"
)

// The index's format lives in package cache, which reads it without any
// registry code; the store writes it.
type (
	indexFile   = cache.Index
	imageRecord = cache.Record
	layerRecord = cache.LayerRecord
)

func newIndex() *indexFile                       { return cache.NewIndex() }
func parseIndex(data []byte) (*indexFile, error) { return cache.ParseIndex(data) }

// updateIndex runs fn on a fresh copy of index.json under the index lock
// and writes the result atomically.
func (s *Store) updateIndex(ctx context.Context, fn func(*indexFile) error) error {
	unlock, err := flock(ctx, s.lockPath("index"), false)
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	if err := fn(idx); err != nil {
		return err
	}
	data, err := json.MarshalIndent(idx, "", " ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.indexPath(), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("image store: writing index: %w", err)
	}
	return nil
}

// readIndex reads index.json from disk (no cache).
func (s *Store) readIndex() (*indexFile, error) {
	data, err := os.ReadFile(s.indexPath())
	if errors.Is(err, fs.ErrNotExist) {
		return newIndex(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	idx, err := parseIndex(data)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", s.indexPath(), err)
	}
	return idx, nil
}
