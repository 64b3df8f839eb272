package netlab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// authority is the lab's CA: it signs a leaf certificate for each server
// name a client asks for (SNI), or for the address it connected to when
// it sends none, so that names added later are served too.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	file string

	mu    sync.Mutex
	leafs map[string]*tls.Certificate
}

func newAuthority(dir string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "netlab test CA", Organization: []string{"agentkernel netlab"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	a := &authority{cert: cert, key: key, leafs: map[string]*tls.Certificate{}}
	a.pem = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	a.file = filepath.Join(dir, "netlab-ca.pem")
	if err := os.WriteFile(a.file, a.pem, 0o644); err != nil {
		return nil, err
	}
	return a, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// getCertificate is the servers' tls.Config.GetCertificate.
func (a *authority) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	subject := canonical(hello.ServerName)
	if subject == "" {
		if hello.Conn == nil {
			return nil, errors.New("netlab: no server name and no connection")
		}
		ap, err := netip.ParseAddrPort(hello.Conn.LocalAddr().String())
		if err != nil {
			return nil, err
		}
		subject = ap.Addr().Unmap().String()
	}
	return a.leaf(subject)
}

func (a *authority) leaf(subject string) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.leafs[subject]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: subject},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(subject); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{subject}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("netlab: certificate for %q: %w", subject, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	a.leafs[subject] = c
	return c, nil
}
