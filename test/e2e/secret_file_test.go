//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFiles: run --secret-file and --placeholder-secrets. A file
// holds the vault's value (or a binding's inline one) at
// /run/agentkernel/secrets/KEY, mode 0400, owned by the command's user
// (root, and uid 1000 with -u), on a read-only tmpfs of its own that the
// command cannot write, replace or extend; AGENTKERNEL_SECRETS_PATH
// names the directory; the value is in no other file of the sandbox and
// no file of the data directory. With --placeholder-secrets the file
// holds the placeholder, the value is nowhere inside, and a request that
// carries the file's content gets the real value upstream. Bad keys,
// path traversal included, a key not in the vault and a placeholder
// file without a binding exit 125 before anything runs.
func TestSecretFiles(t *testing.T) {
	n := newNetEnv(t)
	up := newSecretUpstream(t, n.lab)
	n.a.env = append(n.a.env, "SSL_CERT_FILE="+up.caFile)
	const fileValue = "file-secret-0123456789"
	n.a.stdin = fileValue
	if r := n.a.run("secret", "set", "FKEY"); r.code != 0 {
		t.Fatalf("secret set: %v", r)
	}
	n.a.stdin = ""
	const inline = "inline-secret-98765"

	// The search for a value (given in two halves, $1 and $2, so that
	// the command line does not carry it): every process's environment
	// and the sandbox's files outside the secrets' directory; a control
	// token written to /tmp is found, so the search can fail.
	search := `
control="ctl""-token-77"
printf '%s\n' "$control" > /tmp/control
for needle in "$control" "$1$2"; do
	hits=$( (for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null
		find /tmp /run /workspace /etc /home /root /var -path /run/agentkernel/secrets -prune -o -type f -print 2>/dev/null | xargs -d '\n' grep -sahF -- "$needle" 2>/dev/null) | grep -caF -- "$needle")
	echo "needle ${#needle} hits $hits"
done
`
	inspect := `
d=/run/agentkernel/secrets
echo "path=$AGENTKERNEL_SECRETS_PATH"
echo "FKEY=$(cat "$d/FKEY")"
echo "KEY=$(cat "$d/KEY")"
echo "owner $(stat -c '%a %u %g' "$d/FKEY") me $(id -u) $(id -g)"
echo "dir $(stat -c '%a %u' "$d") $(stat -f -c %T "$d")"
grep " $d " /proc/self/mountinfo | grep -q ' ro,' && echo "mount ro"
(echo x >> "$d/FKEY") 2>/dev/null && echo "appended" || echo "append refused"
(echo x > "$d/NEW") 2>/dev/null && echo "created" || echo "create refused"
(rm -f "$d/FKEY" && test ! -e "$d/FKEY") 2>/dev/null && echo "removed" || echo "remove refused"
(ln -s /etc/shadow "$d/LINK") 2>/dev/null && echo "linked" || echo "link refused"
ls -A "$d" | tr '\n' ' '; echo
`
	for _, user := range []struct{ flag, uid string }{{"", "0"}, {"1000:1000", "1000"}} {
		args := []string{"run", "--image", "host", "-e", "HOME=/tmp", "--network", "filtered", "--allow-domain", upstreamName,
			"-S", "KEY=" + inline + ":" + upstreamName, "--secret-file", "FKEY", "--secret-file", "KEY"}
		if user.flag != "" {
			args = append(args, "-u", user.flag)
		}
		r := n.a.run(append(args, "--", "sh", "-c", inspect)...)
		if r.code != 0 {
			t.Fatalf("run --secret-file (user %q): %v", user.flag, r)
		}
		t.Logf("inside, user %q:\n%s", user.flag, r.stdout)
		for _, want := range []string{
			"path=/run/agentkernel/secrets\n",
			"FKEY=" + fileValue + "\n",
			"KEY=" + inline + "\n",
			fmt.Sprintf("owner 400 %s %s me %s %s\n", user.uid, user.uid, user.uid, user.uid),
			fmt.Sprintf("dir 500 %s tmpfs\n", user.uid),
			"mount ro\n", "append refused\n", "create refused\n", "remove refused\n", "link refused\n",
			"FKEY KEY \n",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("user %q: no %q inside:\n%s\nstderr: %s", user.flag, want, r.stdout, r.stderr)
			}
		}
	}
	// Nowhere else inside: the files are on their own tmpfs, not the
	// sandbox's writable layer or /run.
	r := n.a.run("run", "--image", "host", "-e", "HOME=/tmp", "--network", "none", "--secret-file", "FKEY",
		"--", "sh", "-c", `test -s /run/agentkernel/secrets/FKEY && echo "file present"`+search, "sh", fileValue[:8], fileValue[8:])
	if r.code != 0 || !strings.Contains(r.stdout, "file present") || !strings.Contains(r.stdout, fmt.Sprintf("needle %d hits 1", len("ctl-token-77"))) ||
		!strings.Contains(r.stdout, fmt.Sprintf("needle %d hits 0", len(fileValue))) {
		t.Errorf("the value elsewhere in the sandbox: %v", r)
	}

	// --placeholder-secrets: the file holds the placeholder; the request
	// that carries it arrives with the vault's value.
	r = n.a.run("run", "--image", "host", "-e", "HOME=/tmp", "--network", "filtered", "--allow-domain", upstreamName,
		"-S", "FKEY:"+upstreamName, "--secret-file", "FKEY", "--placeholder-secrets", "--", "sh", "-c", `
v=$(cat "$AGENTKERNEL_SECRETS_PATH/FKEY")
echo "file=$v env=$FKEY"
curl -fsS -H "Authorization: Bearer $v" https://`+upstreamName+`/placeholder-file || echo "curl failed"
`+search, "sh", fileValue[:8], fileValue[8:])
	t.Logf("inside, placeholders:\n%s", r.stdout)
	for _, want := range []string{
		"file=ak-proxy-managed env=ak-proxy-managed\n",
		"upstream ok /placeholder-file\n",
		fmt.Sprintf("needle %d hits 1", len("ctl-token-77")),
		fmt.Sprintf("needle %d hits 0", len(fileValue)),
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("--placeholder-secrets: no %q in %v", want, r)
		}
	}
	if strings.Contains(r.stdout, fileValue) {
		t.Errorf("--placeholder-secrets: the value reached the sandbox:\n%s", r.stdout)
	}
	up.wantAuth(t, "--placeholder-secrets", "/placeholder-file", "Bearer "+fileValue)
	_ = filepath.Walk(n.a.dataDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), fileValue) || strings.Contains(string(b), inline) {
				t.Errorf("%s holds a secret's value in clear", p)
			}
		}
		return nil
	})

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--secret-file", "NOPE"}, "--secret-file NOPE: secret 'NOPE' is not in the vault"},
		{[]string{"--secret-file", "../../etc/passwd"}, "invalid secret name"},
		{[]string{"--secret-file", "a/b"}, "invalid secret name"},
		{[]string{"--secret-file", ".."}, "invalid secret name"},
		{[]string{"--secret-file", "FKEY", "--placeholder-secrets"}, "--secret-file FKEY has no -S/--secret binding"},
		{[]string{"--placeholder-secrets"}, "--placeholder-secrets without --secret-file"},
		{[]string{"--secret-file", "FKEY", "--name", "kept"}, "not supported for persistent sandboxes"},
	} {
		args := append(append([]string{"run", "--image", "host", "--network", "full"}, c.args...), "--", "sh", "-c", "echo ran")
		r := n.a.run(args...)
		if r.code != 125 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stdout, "ran") {
			t.Errorf("%v: want exit 125 saying %q: %v", c.args, c.want, r)
		}
	}
}
