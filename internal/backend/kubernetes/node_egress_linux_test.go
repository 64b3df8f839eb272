package kubernetes

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/kubeegress"
	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
	"github.com/agentkernel/agentkernel/test/testbin"
)

// egressImage is an image holding the agentkernel-full built from this
// tree at kubeegress.DefaultBinary, imported into the shared node.
func egressImage(t *testing.T, n *kubelab.Node) string {
	t.Helper()
	out := testbin.Full(t)
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	const ref = "agentkernel.test/egress:1"
	img := imagetest.Image(t, v1.Config{}, imagetest.Layer(t,
		imagetest.Dir("usr"), imagetest.Dir("usr/local"), imagetest.Dir("usr/local/bin"),
		imagetest.File{Name: strings.TrimPrefix(kubeegress.DefaultBinary, "/"), Body: string(bin), Mode: 0o755}))
	if err := n.Import(context.Background(), map[string]v1.Image{ref: img}); err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestNodeEgressProxy: a sandbox with a domain allow-list runs on the
// node with its egress proxy (the rules' init container, the proxy's
// sidecar, from an image of this tree's agentkernel-full), and from
// inside it: an allowed name resolves and serves; a name off the list
// is answered NXDOMAIN by the proxy without the world's server being
// asked, also when the sandbox asks that server directly; an address
// no allowed name resolved to, a Host header of another name and UDP
// do not get out; and the sandbox cannot change the pod's network. The
// "world" (kubelab.World) is a namespace on the node's bridge that
// counts what reaches it.
func TestNodeEgressProxy(t *testing.T) {
	_, n := shared.Node(t)
	ref := egressImage(t, n)
	w, err := n.StartWorld(context.Background(), []string{"allowed.test", "denied.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ip := w.IP().String()
	b := nodeBackend(t, Options{NoUserNamespace: true, EgressImage: ref, EgressResolvers: []string{ip + ":53"}})
	started := time.Now()
	running(t, b, &Request{Name: "egress", Image: kubelab.TestImage, Profile: mustProfile(t, "moderate"),
		Network: NetworkProxy, AllowDomains: []string{"allowed.test"}})
	t.Logf("pod with its egress proxy running after %v", time.Since(started).Round(time.Millisecond))
	sh := func(script string) (int, string) {
		code, o, e := run(t, b, "egress", "", "sh", "-c", script)
		return code, o + e
	}

	// The pod as the kubelet ran it.
	pod, err := b.client.CoreV1().Pods(b.Namespace()).Get(context.Background(), PodName("egress"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range pod.Status.InitContainerStatuses {
		switch st.Name {
		case "egress-init":
			if st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
				t.Errorf("egress-init: %+v", st.State)
			}
		case "egress":
			if st.State.Running == nil || st.Started == nil || !*st.Started {
				t.Errorf("egress sidecar not running and started: %+v", st)
			}
		}
	}

	// An address before any allowed name resolved to it: refused.
	if code, out := sh("timeout 10 wget -qO- http://" + ip + "/"); code == 0 {
		t.Errorf("wget http://%s/ (an address no allowed name resolved to): %q", ip, out)
	}
	if code, out := sh("timeout 5 nc " + ip + " 8443 </dev/null"); code == 0 && w.Accepted() != 0 {
		t.Errorf("nc %s 8443: %q", ip, out)
	}
	if len(w.Requests()) != 0 || w.Accepted() != 0 {
		t.Fatalf("connections reached the world: requests %q, accepted %d", w.Requests(), w.Accepted())
	}
	// A name off the list, through the pod's resolver and straight to
	// the world's: NXDOMAIN, and the world never asked.
	if _, out := sh("nslookup denied.test"); !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("nslookup denied.test: %q", out)
	}
	if _, out := sh("nslookup denied.test " + ip); !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("nslookup denied.test %s: %q", ip, out)
	}
	if q := w.Queries("denied.test"); q != 0 {
		t.Errorf("the world was asked for denied.test %d times", q)
	}
	// The allowed name: resolved through the proxy, served.
	if code, out := sh("timeout 10 wget -qO- http://allowed.test/"); code != 0 || out != "world allowed.test\n" {
		_, rc := sh("cat /etc/resolv.conf")
		t.Errorf("wget http://allowed.test/: %d %q\nresolv.conf: %s\npod: %s", code, out, rc, podReport(t, b, "egress"))
	}
	if w.Queries("allowed.test") == 0 {
		t.Error("the world was never asked for allowed.test: the answer did not come from upstream")
	}
	// Another name's Host on the allowed name's address: refused.
	if code, out := sh("timeout 10 wget -qO- --header 'Host: denied.test' http://allowed.test/"); code == 0 {
		t.Errorf("Host: denied.test went through: %q", out)
	}
	for _, h := range w.Requests() {
		if h != "allowed.test" {
			t.Errorf("the world served Host %q", h)
		}
	}
	// UDP other than DNS does not leave the pod.
	sh("timeout 5 tftp -g -r x -l /tmp/x " + ip + " 9999")
	time.Sleep(300 * time.Millisecond)
	if d := w.Datagrams(); d != 0 {
		t.Errorf("%d UDP datagrams reached the world", d)
	}
	// The sandbox cannot change the pod's network, nor is it the
	// proxy's user.
	for _, attack := range []string{"ip link set eth0 down", "ip route del default", "ip route add 198.18.0.0/16 dev eth0", "ip addr add 198.18.99.1/32 dev eth0"} {
		if code, out := sh(attack); code == 0 {
			t.Errorf("%s: succeeded: %q", attack, out)
		}
	}
	if _, out := sh("id -u"); strings.TrimSpace(out) == "65531" {
		t.Error("the sandbox runs as the proxy's user")
	}
	if code, out := sh("timeout 10 wget -qO- http://allowed.test/"); code != 0 || out != "world allowed.test\n" {
		t.Errorf("after the attacks, the allowed name: %d %q", code, out)
	}
	// The proxy's refusals are its log.
	logs, err := b.client.CoreV1().Pods(b.Namespace()).GetLogs(PodName("egress"), &corev1.PodLogOptions{Container: "egress"}).Do(context.Background()).Raw()
	if err != nil {
		t.Fatalf("the proxy's log: %v", err)
	}
	if !strings.Contains(string(logs), "denied.test") || !strings.Contains(string(logs), `"denied"`) {
		t.Errorf("the proxy's log names no refusal of denied.test:\n%s", logs)
	}
}
