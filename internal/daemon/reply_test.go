package daemon

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestReplyKeepsErrorKinds: failures a run through the daemon reports
// come back to the CLI as the same kinds of error (exit 127, 126, and a
// [security.commands] refusal with its own wording), as a direct run's.
func TestReplyKeepsErrorKinds(t *testing.T) {
	refused := (&sandbox.CommandRules{Block: []string{"wget"}, BlockFrom: "/p/agentkernel.toml:2"}).Check([]string{"wget"})
	for _, c := range []struct {
		err  error
		kind error
	}{
		{refused, sandbox.ErrCommandRefused},
		{refused, sandbox.ErrCannotInvoke},
		{errors.Join(errors.New("exec x"), sandbox.ErrNotFound), sandbox.ErrNotFound},
		{errors.Join(errors.New("exec x"), sandbox.ErrCannotInvoke), sandbox.ErrCannotInvoke},
	} {
		b, _ := json.Marshal(errorReply(c.err))
		var r Reply
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		got := r.err()
		if !errors.Is(got, c.kind) {
			t.Errorf("%v came back as %v (%s), not %v", c.err, got, b, c.kind)
		}
	}
	b, _ := json.Marshal(errorReply(refused))
	var r Reply
	_ = json.Unmarshal(b, &r)
	if got := r.err(); got.Error() != refused.Error() || errors.Is(got, sandbox.ErrNotFound) {
		t.Errorf("refusal worded %q, want %q", got, refused)
	}
}
