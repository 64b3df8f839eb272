package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// The routes of the SDKs' newer calls: detached commands, a sandbox by
// UUID; and what exec's requests share (env, workdir, sudo, timeout_ms).

// maxTimeoutMS bounds a request's timeout_ms (a day).
const maxTimeoutMS = 24 * 60 * 60 * 1000

// execBody is the body of POST /sandboxes/{name}/exec and …/exec/detach.
type execBody struct {
	Command   []string `json:"command"`
	Env       []string `json:"env"`
	Workdir   string   `json:"workdir"`
	Sudo      bool     `json:"sudo"`
	TimeoutMS *int64   `json:"timeout_ms"`
}

// request checks the body and turns it into an ExecRequest (400s; 403
// for sudo where the server does not allow it).
func (s *Server) execRequest(q execBody) (sandbox.ExecRequest, error) {
	if len(q.Command) == 0 {
		return sandbox.ExecRequest{}, badRequest("command is required")
	}
	for _, kv := range q.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return sandbox.ExecRequest{}, badRequest("env %q: use KEY=VALUE", kv)
		}
	}
	req := sandbox.ExecRequest{Args: q.Command, Env: q.Env, Workdir: q.Workdir}
	if q.Workdir != "" && !strings.HasPrefix(q.Workdir, "/") {
		return sandbox.ExecRequest{}, badRequest("workdir %q: must be absolute", q.Workdir)
	}
	d, err := timeoutMS(q.TimeoutMS)
	if err != nil {
		return sandbox.ExecRequest{}, err
	}
	req.Timeout = d
	if q.Sudo {
		if !s.opts.AllowSudoExec {
			return sandbox.ExecRequest{}, &apiError{status: http.StatusForbidden, msg: "sudo execution is disabled for HTTP API. Set [api].allow_sudo_exec = true to enable it"}
		}
		req.User = "0:0"
	}
	return req, nil
}

// timeoutMS checks a request's timeout_ms: absent is none, else 1 ms to
// a day.
func timeoutMS(ms *int64) (time.Duration, error) {
	if ms == nil {
		return 0, nil
	}
	if *ms <= 0 || *ms > maxTimeoutMS {
		return 0, badRequest("timeout_ms must be between 1 and %d", maxTimeoutMS)
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// timeoutError is the 409 of a command killed at its timeout: exit code
// 124, as run's.
func timeoutError(d time.Duration, output string) error {
	code := 124
	return &apiError{status: http.StatusConflict, msg: fmt.Sprintf("Command timed out after %s and was killed (exit code 124): %s", d, output),
		exitCode: &code, output: &output}
}

// failDetached writes the errors of the detached routes.
func (s *Server) failDetached(w http.ResponseWriter, name, id string, err error) {
	switch {
	case errors.Is(err, sandbox.ErrInvalidID):
		err = badRequest("Invalid command id '%s'", id)
	case errors.Is(err, sandbox.ErrDetachedNotFound):
		err = &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("Detached command '%s' not found", id)}
	case errors.Is(err, sandbox.ErrLogOffset):
		err = &apiError{status: http.StatusRequestedRangeNotSatisfiable, msg: err.Error()}
	}
	s.fail(w, name, err)
}

// decodeExec reads an exec route's sandbox name and body into the
// request both exec routes give the Manager; on bad input it has
// answered already (ok false).
func (s *Server) decodeExec(w http.ResponseWriter, r *http.Request) (name string, req sandbox.ExecRequest, ok bool) {
	n, ok := s.name(w, r)
	if !ok {
		return "", req, false
	}
	var q execBody
	if err := decode(w, r, &q, false); err != nil {
		s.fail(w, n, err)
		return "", req, false
	}
	req, err := s.execRequest(q)
	if err != nil {
		s.fail(w, n, err)
		return "", req, false
	}
	return n, req, true
}

func (s *Server) execDetach(w http.ResponseWriter, r *http.Request) {
	n, req, ok := s.decodeExec(w, r)
	if !ok {
		return
	}
	// The command is the supervisor's from here: this request's end
	// (or its client's) does not end it.
	d, err := s.opts.Manager.ExecDetached(r.Context(), n, req)
	if err != nil {
		s.fail(w, n, err)
		return
	}
	writeData(w, http.StatusOK, d)
}

func (s *Server) detachedList(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	ds, err := s.opts.Manager.DetachedList(r.Context(), n)
	if err != nil {
		s.fail(w, n, err)
		return
	}
	writeData(w, http.StatusOK, ds)
}

func (s *Server) detachedStatus(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	d, err := s.opts.Manager.DetachedStatus(r.Context(), n, id)
	if err != nil {
		s.failDetached(w, n, id, err)
		return
	}
	writeData(w, http.StatusOK, d)
}

// maxLogAnswer bounds one logs answer (a stream holds 16 MiB at most).
const maxLogAnswer = sandbox.DetachedLogCap + 1<<10

func (s *Server) detachedLogs(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	query := r.URL.Query()
	stream := query.Get("stream")
	switch stream {
	case "":
		stream = "stdout"
	case "stdout", "stderr":
	default:
		s.fail(w, n, badRequest("Invalid stream '%s': use stdout or stderr", stream))
		return
	}
	var offset int64
	if v := query.Get("offset"); v != "" {
		o, err := strconv.ParseInt(v, 10, 64)
		if err != nil || o < 0 {
			s.fail(w, n, badRequest("Invalid offset '%s': a byte offset, 0 or more", v))
			return
		}
		offset = o
	}
	var buf limitedBuffer
	buf.max = maxLogAnswer
	if _, err := s.opts.Manager.DetachedLogs(r.Context(), n, id, stream, offset, &buf); err != nil {
		s.failDetached(w, n, id, err)
		return
	}
	writeData(w, http.StatusOK, map[string]string{stream: buf.String()})
}

func (s *Server) detachedKill(w http.ResponseWriter, r *http.Request) {
	n, ok := s.name(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if _, err := s.opts.Manager.DetachedKill(r.Context(), n, id); err != nil {
		s.failDetached(w, n, id, err)
		return
	}
	writeData(w, http.StatusOK, "Command killed")
}

// sandboxSub answers /sandboxes/{name}/{sub} for the paths no other
// route takes: GET /sandboxes/by-uuid/{uuid} (a pattern of its own
// would conflict with /sandboxes/{name}/logs and the like in
// ServeMux), else the JSON 404.
func (s *Server) sandboxSub(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("name") != "by-uuid" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		if sw, ok := w.(*statusWriter); ok {
			sw.route = "not_found" // as every other miss
		}
		writeErr(w, http.StatusNotFound, "Not found")
		return
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.route = "GET /sandboxes/by-uuid/{uuid}"
	}
	info, err := s.opts.Manager.GetByUUID(r.Context(), r.PathValue("sub"))
	if errors.Is(err, sandbox.ErrInvalidUUID) {
		s.fail(w, "", badRequest("Invalid sandbox UUID"))
		return
	}
	if err != nil {
		s.fail(w, "", err)
		return
	}
	writeData(w, http.StatusOK, s.info(info))
}

// limitedBuffer collects up to max bytes; more is an error.
type limitedBuffer struct {
	strings.Builder
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, errors.New("log answer too large")
	}
	return b.Builder.Write(p)
}
