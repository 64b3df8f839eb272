package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// envelope is every JSON answer: {"success":true,"data":…} or
// {"success":false,"error":"…"} (409s of commands add exit_code and
// output).
type envelope struct {
	Success  bool    `json:"success"`
	Data     any     `json:"data,omitempty"`
	Error    string  `json:"error,omitempty"`
	ExitCode *int    `json:"exit_code,omitempty"`
	Output   *string `json:"output,omitempty"`
}

// successEnvelope always carries data, even when it is an empty string.
type successEnvelope struct {
	Success bool `json:"success"`
	Data    any  `json:"data"`
}

// marshal is compact JSON without HTML escaping ("<api_key>" stays
// readable), no trailing newline.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = marshal(envelope{Error: "encoding the answer: " + err.Error()})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeData(w http.ResponseWriter, status int, data any) {
	writeJSON(w, status, successEnvelope{Success: true, Data: data})
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, envelope{Error: msg})
}

// apiError is a failure with its status code.
type apiError struct {
	status   int
	msg      string
	exitCode *int
	output   *string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// exitError is the 409 of a command that exited non-zero.
func exitError(code int, output string) error {
	return &apiError{status: http.StatusConflict, msg: fmt.Sprintf("Command exited with code %d: %s", code, output),
		exitCode: &code, output: &output}
}

// fail writes err with the status it maps to.
func (s *Server) fail(w http.ResponseWriter, name string, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = s.classify(name, err)
	}
	if ae.status >= 500 {
		s.opts.Logger.Error("request failed", "error", err)
	}
	writeJSON(w, ae.status, envelope{Error: ae.msg, ExitCode: ae.exitCode, Output: ae.output})
}

// classify maps the Manager's errors to statuses and the messages the
// SDKs show.
func (s *Server) classify(name string, err error) *apiError {
	var pe *sandbox.PathError
	switch {
	case errors.Is(err, sandbox.ErrSandboxNotFound):
		return &apiError{status: http.StatusNotFound, msg: "Sandbox not found"}
	case errors.Is(err, sandbox.ErrSandboxExists):
		return &apiError{status: http.StatusConflict, msg: fmt.Sprintf("Sandbox '%s' already exists", name)}
	case errors.Is(err, sandbox.ErrNotRunning):
		return &apiError{status: http.StatusConflict, msg: fmt.Sprintf("Sandbox '%s' is not running. Start it with: agentkernel start %s", name, name)}
	case errors.Is(err, sandbox.ErrRunning):
		return &apiError{status: http.StatusConflict, msg: fmt.Sprintf("Sandbox '%s' is running", name)}
	case errors.As(err, &pe) && pe.Refused:
		return &apiError{status: http.StatusBadRequest, msg: err.Error()}
	case errors.As(err, &pe) && pe.NotExist:
		return &apiError{status: http.StatusNotFound, msg: err.Error()}
	case errors.Is(err, sandbox.ErrUnsupported):
		return &apiError{status: http.StatusNotImplemented, msg: err.Error()}
	case errors.Is(err, sandbox.ErrDetachedLimit):
		return &apiError{status: http.StatusTooManyRequests, msg: err.Error()}
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrCannotInvoke):
		code := 127
		if errors.Is(err, sandbox.ErrCannotInvoke) {
			code = 126
		}
		return exitError(code, err.Error()).(*apiError)
	}
	return &apiError{status: http.StatusInternalServerError, msg: err.Error()}
}

// decode reads the JSON body into v. An empty body is {} when optional
// (GETs and bodiless POSTs from SDKs); explicit nulls leave fields unset.
// The read deadline is lifted once the body is in.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	body := http.MaxBytesReader(w, r.Body, MaxBody)
	b, err := io.ReadAll(body)
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("Request body exceeds the maximum size of %d bytes", MaxBody)}
		}
		return badRequest("Failed to read body")
	}
	if optional && len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return badRequest("Invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// filePath turns the segments after "files" into an absolute path and
// refuses what the contract refuses: "..", /proc, /sys, /dev.
func filePath(seg []string) (string, error) {
	clean := make([]string, 0, len(seg))
	for _, s := range seg {
		switch s {
		case "..":
			return "", badRequest("Invalid path: '..' is not allowed")
		case ".", "":
			continue
		}
		if strings.ContainsRune(s, 0) {
			return "", badRequest("Invalid path: NUL byte")
		}
		clean = append(clean, s)
	}
	if len(clean) == 0 {
		return "", badRequest("Invalid path: empty")
	}
	p := "/" + strings.Join(clean, "/")
	switch clean[0] {
	case "proc", "sys", "dev":
		return "", badRequest("Invalid path: access to /%s is not allowed", clean[0])
	}
	return p, nil
}

// checkPath applies filePath's rules to a path given in a body.
func checkPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", badRequest("Invalid path %q: must be absolute", p)
	}
	return filePath(strings.Split(p, "/"))
}
