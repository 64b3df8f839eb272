package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// SnapshotInfo is a snapshot on the wire (upstream's metadata, without
// the image tag: no image is made).
type SnapshotInfo struct {
	Name      string `json:"name"`
	Sandbox   string `json:"sandbox"`
	Backend   string `json:"backend"`
	BaseImage string `json:"base_image,omitempty"`
	VCPUs     int64  `json:"vcpus,omitempty"`
	MemoryMB  int64  `json:"memory_mb,omitempty"`
	Layers    int    `json:"layers"`
	CreatedAt string `json:"created_at"`
	// Memory: the snapshot holds the running sandbox's memory too.
	Memory bool `json:"memory,omitempty"`
}

func snapshotInfo(s *sandbox.Snapshot) SnapshotInfo {
	return SnapshotInfo{Name: s.Name, Sandbox: s.Sandbox, Backend: s.Backend, BaseImage: s.BaseImage, VCPUs: s.VCPUs,
		MemoryMB: s.MemoryMB, Layers: s.Layers, CreatedAt: s.CreatedAt.UTC().Format(time.RFC3339Nano), Memory: s.Memory}
}

// snapshotFail writes a snapshot route's error: the snapshots' own
// first, then the sandboxes' (sandbox names the sandbox concerned).
func (s *Server) snapshotFail(w http.ResponseWriter, snap, sb string, err error) {
	switch {
	case errors.Is(err, sandbox.ErrSnapshotNotFound):
		writeErr(w, http.StatusNotFound, fmt.Sprintf("Snapshot '%s' not found", snap))
	case errors.Is(err, sandbox.ErrSnapshotExists):
		writeErr(w, http.StatusConflict, fmt.Sprintf("Snapshot '%s' already exists", snap))
	case errors.Is(err, sandbox.ErrSandboxNotFound):
		writeErr(w, http.StatusNotFound, fmt.Sprintf("Sandbox '%s' not found", sb))
	default:
		s.fail(w, sb, err)
	}
}

// snapshotName is the {name} wildcard of a snapshot route, validated
// (400).
func (s *Server) snapshotName(w http.ResponseWriter, r *http.Request) (string, bool) {
	n := r.PathValue("name")
	if err := sandbox.ValidateSnapshotName(n); err != nil {
		s.fail(w, n, badRequest("%s", err.Error()))
		return "", false
	}
	return n, true
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	all, err := s.opts.Manager.ListSnapshots(r.Context())
	if err != nil {
		s.snapshotFail(w, "", "", err)
		return
	}
	out := make([]SnapshotInfo, 0, len(all))
	for _, sn := range all {
		out = append(out, snapshotInfo(sn))
	}
	writeData(w, http.StatusOK, out)
}

func (s *Server) takeSnapshot(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Sandbox string `json:"sandbox"`
		Name    string `json:"name"`
		Memory  bool   `json:"memory"`
	}
	if err := decode(w, r, &q, false); err != nil {
		s.fail(w, "", err)
		return
	}
	if err := sandbox.ValidateName(q.Sandbox); err != nil {
		s.fail(w, q.Sandbox, badRequest("%s", err.Error()))
		return
	}
	name := q.Name
	if name == "" {
		name = sandbox.DefaultSnapshotName(q.Sandbox, time.Now())
	}
	if err := sandbox.ValidateSnapshotName(name); err != nil {
		s.fail(w, name, badRequest("%s", err.Error()))
		return
	}
	sn, err := s.opts.Manager.TakeSnapshotWith(r.Context(), q.Sandbox, name, sandbox.SnapshotOptions{Memory: q.Memory})
	if q.Memory && errors.Is(err, sandbox.ErrUnsupported) {
		// A memory snapshot of this sandbox (its backend, its state) is
		// a request this server refuses, not a route it lacks.
		s.fail(w, name, badRequest("%s", err.Error()))
		return
	}
	if err != nil {
		s.snapshotFail(w, name, q.Sandbox, err)
		return
	}
	writeData(w, http.StatusCreated, snapshotInfo(sn))
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	n, ok := s.snapshotName(w, r)
	if !ok {
		return
	}
	sn, err := s.opts.Manager.GetSnapshot(r.Context(), n)
	if err != nil {
		s.snapshotFail(w, n, "", err)
		return
	}
	writeData(w, http.StatusOK, snapshotInfo(sn))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	n, ok := s.snapshotName(w, r)
	if !ok {
		return
	}
	if err := s.opts.Manager.DeleteSnapshot(r.Context(), n); err != nil {
		s.snapshotFail(w, n, "", err)
		return
	}
	writeData(w, http.StatusOK, "Snapshot deleted")
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	n, ok := s.snapshotName(w, r)
	if !ok {
		return
	}
	var q struct {
		AsName string `json:"as_name"`
	}
	if err := decode(w, r, &q, true); err != nil {
		s.fail(w, n, err)
		return
	}
	as := q.AsName
	if as == "" {
		sn, err := s.opts.Manager.GetSnapshot(r.Context(), n)
		if err != nil {
			s.snapshotFail(w, n, "", err)
			return
		}
		as = sandbox.DefaultRestoreName(sn.Sandbox)
	}
	if err := sandbox.ValidateName(as); err != nil {
		s.fail(w, as, badRequest("%s", err.Error()))
		return
	}
	info, err := s.opts.Manager.RestoreSnapshot(r.Context(), n, as)
	if err != nil {
		s.snapshotFail(w, n, as, err)
		return
	}
	writeData(w, http.StatusCreated, s.info(info))
}
