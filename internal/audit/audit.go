// Package audit is agentkernel's audit log: one append-only JSONL file,
// <data-dir>/audit.jsonl, with a line for every create, start, stop,
// remove and exec of a persistent sandbox — what was done, to which
// sandbox, by whom, how long it took and how it ended — and for each
// receipt written, parallel job and pipeline step.
//
// Every entry is one write(2) on a descriptor opened with O_APPEND, so
// lines written by concurrent agentkernel processes never interleave; a
// write cut short (a full disk) leaves at most its own line unfinished,
// and Read skips that fragment while keeping the entry appended after it. Nothing is ever rewritten in place. The package has
// no platform code and no dependencies beyond the standard library.
package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Actions recorded in the log.
const (
	ActionCreate = "create"
	ActionStart  = "start"
	ActionStop   = "stop"
	ActionRemove = "remove"
	ActionExec   = "exec"
	// ActionNetworkDeny is a connection or name a sandbox's network
	// policy refused (Details says which, and why; ExitCode is unset).
	ActionNetworkDeny = "network_deny"
	// ActionReceiptIssued is a signed execution receipt written (run or
	// exec --receipt); Details say its id, mode, file and payload hash.
	ActionReceiptIssued = "receipt_issued"
	// ActionParallelJob and ActionPipelineStep are one job of
	// 'parallel' and one step of 'pipeline' (Sandbox: parallel-NAME,
	// <file>-NAME; Details: the image).
	ActionParallelJob  = "parallel_job"
	ActionPipelineStep = "pipeline_step"
	// ActionSSHConnected and ActionSSHDisconnected are an SSH connection
	// into a sandbox, once logged in and once ended (User,
	// CertFingerprint; DurationSecs at the end).
	ActionSSHConnected    = "ssh_connected"
	ActionSSHDisconnected = "ssh_disconnected"
)

// Entry is one line of the audit log.
type Entry struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	Action  string    `json:"action"`
	// Command is the argv of an exec.
	Command []string `json:"command,omitempty"`
	// ExitCode of an exec (shell convention: 128+N for signal N);
	// nil for other actions.
	ExitCode *int `json:"exit_code,omitempty"`
	// DurationMS is how long the action took, in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// Who did it: "uid=0(root) via cli", "api key …", ….
	Who string `json:"who"`
	// Error is set when the action failed.
	Error string `json:"error,omitempty"`
	// Details describe the action further (a refused connection: what,
	// why, and how many times).
	Details string `json:"details,omitempty"`
	// User and CertFingerprint are an SSH connection's login name and
	// its certificate's SHA256 fingerprint (ssh_connected,
	// ssh_disconnected); DurationSecs is how long it lasted
	// (ssh_disconnected).
	User            string  `json:"user,omitempty"`
	CertFingerprint string  `json:"cert_fingerprint,omitempty"`
	DurationSecs    float64 `json:"duration_secs,omitempty"`
	// Recording is the file a session's terminal was recorded to
	// (attach --record; an SSH session's recording).
	Recording string `json:"recording,omitempty"`
}

// maxCommand bounds one entry: longer argv are cut, so that an entry stays
// one small atomic write.
const maxCommand = 2048

// Log is the audit log file at Path.
type Log struct {
	Path string
}

// New returns the audit log of dataDir.
func New(dataDir string) *Log { return &Log{Path: filepath.Join(dataDir, "audit.jsonl")} }

// Append writes e as one line.
func (l *Log) Append(e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Command = clip(e.Command)
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return errors.Join(err, f.Close())
}

func clip(argv []string) []string {
	n := 0
	for i, a := range argv {
		n += len(a)
		if n > maxCommand {
			out := append([]string{}, argv[:i]...)
			if k := maxCommand - (n - len(a)); k > 0 {
				out = append(out, a[:k])
			}
			return append(out, "…")
		}
	}
	return argv
}

// Filter selects entries: Sandbox "" means every sandbox, Last 0 means
// every entry (else the newest Last).
type Filter struct {
	Sandbox string
	Last    int
}

// Read returns the entries matching f, oldest first. A missing log is
// empty; a damaged line (a writer killed mid-write) is skipped.
func (l *Log) Read(f Filter) ([]Entry, error) {
	file, err := os.Open(l.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return []Entry{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer file.Close()
	out := []Entry{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Entry
		line := sc.Bytes()
		if json.Unmarshal(line, &e) != nil {
			// The unfinished line of a failed write, with the next
			// entry appended to it: keep that entry.
			k := bytes.LastIndex(line, []byte(`{"time":`))
			if k <= 0 || json.Unmarshal(line[k:], &e) != nil {
				continue
			}
		}
		if e.Action == "" {
			continue
		}
		if f.Sandbox != "" && e.Sandbox != f.Sandbox {
			continue
		}
		out = append(out, e)
		if f.Last > 0 && len(out) > 2*f.Last {
			out = append(out[:0], out[len(out)-f.Last:]...)
		}
	}
	if f.Last > 0 && len(out) > f.Last {
		out = out[len(out)-f.Last:]
	}
	return out, sc.Err()
}
