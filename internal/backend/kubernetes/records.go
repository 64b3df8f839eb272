package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// A persistent sandbox's record (its sandbox.Info and Spec) is a Secret
// of the sandbox's namespace: agentkernel-sandbox-<name>, of type
// RecordType, labelled like every object of the backend
// (ManagedLabel, SandboxLabel=<name>), the record as JSON under
// recordKey. Every server of the namespace reads and writes the same
// records, so that a server's restart loses none and several servers
// share one set of names. The API server gives what the store needs:
// create fails with AlreadyExists for a taken name, an update carries the
// resourceVersion it read (a conflict is read again and retried), a list
// is one call with a label and a field selector (the type).
const (
	// RecordType is the type of the records' Secrets: a Secret of
	// another type never counts as a record, nor is deleted as one.
	RecordType corev1.SecretType = "agentkernel.io/sandbox-record"
	// recordKey is the Secret's one data key.
	recordKey = "record.json"
	// recordPrefix starts a record's Secret's name.
	recordPrefix = objectPrefix + "sandbox-"
)

// RecordName is the name of the Secret that holds name's record.
func RecordName(name string) string { return recordPrefix + name }

// record is a sandbox's record.
type record struct {
	Info *sandbox.Info `json:"info"`
	Spec *sandbox.Spec `json:"spec"`
	// Starting is set while a server starts the sandbox, so that
	// another server's Start waits for it rather than replacing its pod.
	Starting *startClaim `json:"starting,omitempty"`
	// Detached are the detached commands of the sandbox's earlier pods,
	// as Stop found them (detached.go: keepDetached), oldest first.
	Detached []sandbox.DetachedCommand `json:"detached,omitempty"`
}

// startClaim says which server starts the sandbox, until when at most
// (a server that died while starting holds it no longer).
type startClaim struct {
	By    string    `json:"by"`
	Until time.Time `json:"until"`
}

// recordConflicts bounds the retries of an update that keeps meeting
// another server's write of the same record.
var recordConflicts = wait.Backoff{Steps: 12, Duration: 5 * time.Millisecond, Factor: 1.6, Jitter: 0.5, Cap: 500 * time.Millisecond}

func (s *Sandboxes) secrets() typedcorev1.SecretInterface {
	return s.b.client.CoreV1().Secrets(s.b.ns)
}

// recordListOptions selects the records: the backend's label, a sandbox
// name, and the records' type.
func recordListOptions() metav1.ListOptions {
	return metav1.ListOptions{
		LabelSelector: labels.Set{ManagedLabel: ManagedValue}.String() + "," + SandboxLabel,
		FieldSelector: fields.OneTermEqualSelector("type", string(RecordType)).String(),
	}
}

// ours reports whether sec is a record of this backend for name.
func ours(sec *corev1.Secret, name string) bool {
	return sec.Type == RecordType && sec.Name == RecordName(name) &&
		sec.Labels[ManagedLabel] == ManagedValue && sec.Labels[SandboxLabel] == name
}

func notFound(name string) error {
	return fmt.Errorf("sandbox %q: %w", name, sandbox.ErrSandboxNotFound)
}

// recordSecret is r as its Secret (a new one; Update sets the
// resourceVersion it read).
func (s *Sandboxes) recordSecret(r *record) (*corev1.Secret, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      RecordName(r.Info.Name),
			Namespace: s.b.ns,
			Labels:    map[string]string{ManagedLabel: ManagedValue, SandboxLabel: r.Info.Name},
		},
		Type: RecordType,
		Data: map[string][]byte{recordKey: b},
	}, nil
}

// decode reads sec's record, which must be name's.
func decode(sec *corev1.Secret, name string) (*record, error) {
	var r record
	if err := json.Unmarshal(sec.Data[recordKey], &r); err != nil || r.Info == nil || r.Spec == nil || r.Info.Name != name {
		if err == nil {
			err = errors.New("no info, no spec, or another name")
		}
		return nil, fmt.Errorf("sandbox %q: its record (Secret %s/%s) cannot be read (%v): fix or delete it with kubectl", name, sec.Namespace, sec.Name, err)
	}
	return &r, nil
}

// load reads name's record and its Secret; a name that is no DNS label
// is not found, and nothing is asked of the cluster for it.
func (s *Sandboxes) load(ctx context.Context, name string) (*record, *corev1.Secret, error) {
	if err := ValidName(name); err != nil {
		return nil, nil, notFound(name)
	}
	sec, err := s.secrets().Get(ctx, RecordName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, notFound(name)
	}
	if err != nil {
		return nil, nil, s.b.apiError("get sandbox record", err)
	}
	if !ours(sec, name) {
		return nil, nil, notFound(name)
	}
	r, err := decode(sec, name)
	if err != nil {
		return nil, nil, err
	}
	return r, sec, nil
}

// insert creates r's record: the API server's AlreadyExists is the name
// taken (by a sandbox, or by a Secret of someone else's of that name).
func (s *Sandboxes) insert(ctx context.Context, r *record) (*corev1.Secret, error) {
	sec, err := s.recordSecret(r)
	if err != nil {
		return nil, err
	}
	got, err := s.secrets().Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if other, gerr := s.secrets().Get(ctx, sec.Name, metav1.GetOptions{}); gerr == nil && !ours(other, r.Info.Name) {
			return nil, fmt.Errorf("sandbox %q: %w: a Secret %s not made by agentkernel holds the name in namespace %s (pick another name)", r.Info.Name, sandbox.ErrSandboxExists, sec.Name, s.b.ns)
		}
		return nil, fmt.Errorf("sandbox %q: %w", r.Info.Name, sandbox.ErrSandboxExists)
	}
	if err != nil {
		return nil, s.b.apiError("create sandbox record", err)
	}
	return got, nil
}

// modify reads name's record, lets fn change it and writes it back with
// the resourceVersion it read; another server's write in between is a
// conflict, and the whole is done again from a fresh read (so fn may run
// more than once, each time on the record as stored).
func (s *Sandboxes) modify(ctx context.Context, name string, fn func(*record) error) (*record, error) {
	var out *record
	err := retry.OnError(recordConflicts, apierrors.IsConflict, func() error {
		r, sec, err := s.load(ctx, name)
		if err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
		next, err := s.recordSecret(r)
		if err != nil {
			return err
		}
		next.ResourceVersion, next.UID = sec.ResourceVersion, sec.UID
		next.Annotations = sec.Annotations
		if _, err := s.secrets().Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return notFound(name)
			}
			if apierrors.IsConflict(err) {
				return err
			}
			return s.b.apiError("update sandbox record", err)
		}
		out = r
		return nil
	})
	if apierrors.IsConflict(err) {
		return nil, fmt.Errorf("sandbox %q: its record kept changing under other writers: try again: %w", name, err)
	}
	return out, err
}

// drop deletes the record's Secret, the one read (its UID a
// precondition): a record made again since under the name stays.
func (s *Sandboxes) drop(ctx context.Context, sec *corev1.Secret) error {
	err := s.secrets().Delete(ctx, sec.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &sec.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return s.b.apiError("delete sandbox record", err)
	}
	return nil
}

// listed is a record as List read it; rec is nil when it cannot be read.
type listed struct {
	name string
	rec  *record
	sec  *corev1.Secret
	err  error
}

// all reads every record of the namespace in one call.
func (s *Sandboxes) all(ctx context.Context) ([]listed, error) {
	l, err := s.secrets().List(ctx, recordListOptions())
	if err != nil {
		return nil, s.b.apiError("list sandbox records", err)
	}
	out := make([]listed, 0, len(l.Items))
	for i := range l.Items {
		sec := &l.Items[i]
		name := sec.Labels[SandboxLabel]
		if ValidName(name) != nil || !ours(sec, name) {
			continue
		}
		r, err := decode(sec, name)
		out = append(out, listed{name: name, rec: r, sec: sec, err: err})
	}
	return out, nil
}
