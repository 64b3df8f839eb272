//go:build linux

package kubelab

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Version is the Kubernetes version scripts/kube.sh builds (its
// scripts/kube/go.mod); the cache directory is named after it.
const Version = "v1.36.3"

// Dir is the directory with kube-apiserver and etcd: $AGENTKERNEL_KUBE_DIR,
// else scripts/kube.sh's cache. ok is false when either is missing.
func Dir() (dir string, ok bool) {
	dir = os.Getenv("AGENTKERNEL_KUBE_DIR")
	if dir == "" {
		cache := os.Getenv("AGENTKERNEL_KUBE_CACHE")
		if cache == "" {
			if os.Geteuid() == 0 {
				cache = "/var/cache/agentkernel"
			} else if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
				cache = filepath.Join(x, "agentkernel")
			} else {
				home, _ := os.UserHomeDir()
				cache = filepath.Join(home, ".cache", "agentkernel")
			}
		}
		dir = filepath.Join(cache, "kube-"+Version)
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
			return dir, false
		}
	}
	return dir, true
}

// MissingHint says how to get the binaries.
const MissingHint = "kube-apiserver and etcd are not built: run scripts/kube.sh (or set AGENTKERNEL_KUBE_DIR)"

// Lab is a running API server.
type Lab struct {
	URL string // https://127.0.0.1:PORT
	// CAData is the PEM of the CA that signed the server's certificate.
	CAData []byte
	// AdminToken authenticates as "admin" in system:masters (everything
	// allowed); UserToken as "nobody", who has no role at all.
	AdminToken, UserToken string
	// nodeToken authenticates as the node's kubelet (system:node:NAME in
	// system:nodes, which the Node authorizer serves), schedulerToken as
	// system:kube-scheduler (its default role).
	nodeToken, schedulerToken string
	ca                        *x509.Certificate
	caKey                     *ecdsa.PrivateKey
	dir                       string
	procs                     []*exec.Cmd
}

// Start starts etcd and kube-apiserver under dir (which must exist and
// be private), and waits until the API answers /readyz. Close stops them.
func Start(ctx context.Context, bin, dir string) (*Lab, error) {
	l := &Lab{dir: dir}
	ok := false
	defer func() {
		if !ok {
			l.Close()
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdPeer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	l.URL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	if err := l.writeSecrets(); err != nil {
		return nil, err
	}
	if err := l.start(filepath.Join(bin, "etcd"), "etcd.log",
		"--name=lab", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdClient, "--advertise-client-urls="+etcdClient,
		"--listen-peer-urls="+etcdPeer, "--initial-advertise-peer-urls="+etcdPeer,
		"--initial-cluster=lab="+etcdPeer, "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return nil, err
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	if err := l.start(filepath.Join(bin, "kube-apiserver"), "apiserver.log",
		"--etcd-servers="+etcdClient,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--tls-cert-file="+p("serving.crt"), "--tls-private-key-file="+p("serving.key"),
		"--cert-dir="+p("certs"),
		"--token-auth-file="+p("tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// That plugin taints a new node not-ready until the controller
		// manager's node lifecycle controller clears it; no controller
		// manager runs here, so the node would never take a pod.
		"--disable-admission-plugins=TaintNodesByCondition",
		// How the API server reaches a kubelet (exec, logs), when a
		// node runs (StartNode): its InternalIP, a serving certificate
		// the lab's CA signed, and a client certificate of its own.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority="+p("ca.crt"),
		"--kubelet-client-certificate="+p("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+p("apiserver-kubelet-client.key"),
		"--service-account-key-file="+p("sa.key"), "--service-account-signing-key-file="+p("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/24",
		"--allow-privileged=false",
		"--enable-priority-and-fairness=false",
		"--v=0"); err != nil {
		return nil, err
	}
	if err := l.waitReady(ctx, 3*time.Minute); err != nil {
		return nil, err
	}
	ok = true
	return l, nil
}

func (l *Lab) start(bin, logName string, args ...string) error {
	log, err := os.Create(filepath.Join(l.dir, logName))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	log.Close()
	l.procs = append(l.procs, cmd)
	return nil
}

// Log returns the tail of a process's log ("etcd.log", "apiserver.log").
func (l *Lab) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(l.dir, name))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// HTTPClient is a client that trusts the lab's CA.
func (l *Lab) HTTPClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(l.CAData)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func (l *Lab) waitReady(ctx context.Context, limit time.Duration) error {
	c := l.HTTPClient()
	deadline := time.Now().Add(limit)
	var last string
	for {
		for _, p := range l.procs {
			if p.ProcessState != nil || p.Process.Signal(syscall.Signal(0)) != nil {
				return fmt.Errorf("%s exited: %s", filepath.Base(p.Path), l.Log(filepath.Base(p.Path)+".log")+l.Log("apiserver.log"))
			}
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", l.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+l.AdminToken)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after %s (%s): %s", limit, last, l.Log("apiserver.log"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Close stops the processes (SIGTERM, then SIGKILL after 5s) and waits
// for them. The caller removes the directory.
func (l *Lab) Close() {
	for i := len(l.procs) - 1; i >= 0; i-- {
		p := l.procs[i]
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	l.procs = nil
}

// Kubeconfig writes a kubeconfig for token (with namespace ns) and
// returns its path.
func (l *Lab) Kubeconfig(name, token, ns string) (string, error) {
	ca := filepath.Join(l.dir, "ca.crt")
	y := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: u
  user:
    token: %s
contexts:
- name: lab
  context:
    cluster: lab
    user: u
    namespace: %s
current-context: lab
`, l.URL, ca, token, ns)
	p := filepath.Join(l.dir, name)
	return p, os.WriteFile(p, []byte(y), 0o600)
}

func (l *Lab) writeSecrets() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubelab CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	l.ca, l.caKey = ca, caKey
	srvCrt, srvKey, err := l.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	})
	if err != nil {
		return err
	}
	// The identity the API server shows a kubelet.
	kcCrt, kcKey, err := l.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	l.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	l.AdminToken, l.UserToken = token(), token()
	l.nodeToken, l.schedulerToken = token(), token()
	files := map[string][]byte{
		"ca.crt":                       l.CAData,
		"serving.crt":                  srvCrt,
		"serving.key":                  srvKey,
		"apiserver-kubelet-client.crt": kcCrt,
		"apiserver-kubelet-client.key": kcKey,
		"sa.key":                       keyPEM(saKey),
		"tokens.csv": []byte(l.AdminToken + ",admin,admin-uid,\"system:masters\"\n" +
			l.UserToken + ",nobody,nobody-uid\n" +
			l.nodeToken + ",system:node:" + NodeName + ",node-uid,\"system:nodes\"\n" +
			l.schedulerToken + ",system:kube-scheduler,scheduler-uid\n"),
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(l.dir, n), b, 0o600); err != nil {
			return err
		}
	}
	return os.Mkdir(filepath.Join(l.dir, "certs"), 0o700)
}

// issue signs tmpl (its subject, usages and addresses) with the lab's CA
// for a fresh key, and returns both as PEM.
func (l *Lab) issue(tmpl *x509.Certificate) (crtPEM, keyPEMBytes []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, l.ca, &k.PublicKey, l.caKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM(k), nil
}

func keyPEM(k *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func token() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freePorts finds n free loopback ports (held together, then released:
// another process could take one meanwhile, which Start then reports).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
