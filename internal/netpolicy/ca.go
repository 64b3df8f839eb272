package netpolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"
)

// Validity of the certificates the injector makes.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 24 * time.Hour
	// leafRenew is how long before its end a cached leaf is replaced.
	leafRenew = time.Hour
	// backdate covers clocks that lag the host's.
	backdate = time.Hour
	// maxLeaves bounds the leaf cache (leaves are only minted for bound
	// hosts, so it is never full in practice).
	maxLeaves = 256
)

// NewCA makes a sandbox's CA for secret injection: an ECDSA P-256 key and
// a self-signed certificate ("agentkernel sandbox NAME CA", valid from an
// hour ago for ten years, CA with path length 0, for server
// authentication only). With hosts, the certificate carries a critical
// name constraint permitting only those DNS names, so that even its key
// could vouch for nothing else; a later binding to another host then
// needs a new CA. certPEM is the certificate alone, for the sandbox's
// trust store; the private key never leaves the returned tls.Certificate.
func NewCA(name string, hosts ...string) (ca tls.Certificate, certPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("secret injection CA: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	skid := sha256.Sum256(elliptic.MarshalCompressed(elliptic.P256(), key.X, key.Y))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: strings.Join(strings.Fields("agentkernel sandbox "+name+" CA"), " ")},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		SubjectKeyId:          skid[:20],
	}
	for _, h := range hosts {
		n, ok := normalName(h)
		if !ok {
			return tls.Certificate{}, nil, fmt.Errorf("secret injection CA: %q is not a host name", h)
		}
		tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, n)
	}
	tmpl.PermittedDNSDomainsCritical = len(tmpl.PermittedDNSDomains) > 0
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("secret injection CA: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("secret injection CA: %w", err)
	}
	ca = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func randomSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("secret injection: serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// issuer mints and caches the leaf certificates of the bound hosts.
type issuer struct {
	ca    *x509.Certificate
	key   *ecdsa.PrivateKey
	now   func() time.Time
	mu    sync.Mutex
	cache map[string]*tls.Certificate
}

// newIssuer checks a CA (a CA certificate with its own private key, an
// ECDSA or other crypto.Signer key the x509 package can sign with).
func newIssuer(ca tls.Certificate, now func() time.Time) (*issuer, error) {
	if len(ca.Certificate) == 0 || ca.PrivateKey == nil {
		return nil, errors.New("the CA needs its certificate and its private key")
	}
	cert := ca.Leaf
	if cert == nil {
		c, err := x509.ParseCertificate(ca.Certificate[0])
		if err != nil {
			return nil, fmt.Errorf("the CA certificate does not parse: %w", err)
		}
		cert = c
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("the CA certificate is not a CA (basic constraints and certificate signing)")
	}
	key, ok := ca.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("the CA key is not an ECDSA key (NewCA makes one)")
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("the CA key does not belong to the CA certificate")
	}
	if n := now(); n.After(cert.NotAfter) || n.Before(cert.NotBefore) {
		return nil, fmt.Errorf("the CA certificate is not valid now (valid from %s until %s)", cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return &issuer{ca: cert, key: key, now: now, cache: map[string]*tls.Certificate{}}, nil
}

// permits reports whether the CA's name constraints (if any) allow a
// certificate for host.
func (s *issuer) permits(host string) bool {
	if len(s.ca.PermittedDNSDomains) == 0 {
		return true
	}
	for _, d := range s.ca.PermittedDNSDomains {
		d = strings.ToLower(strings.TrimPrefix(d, "."))
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

// leaf returns a certificate for host (a normalised name), minted on
// first use and again when it nears its end.
func (s *issuer) leaf(host string) (*tls.Certificate, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cache[host]; c != nil && now.Before(c.Leaf.NotAfter.Add(-leafRenew)) {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	end := now.Add(leafValidity)
	if end.After(s.ca.NotAfter) {
		end = s.ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host},
		DNSNames:              []string{host},
		NotBefore:             now.Add(-backdate),
		NotAfter:              end,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		AuthorityKeyId:        s.ca.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &key.PublicKey, s.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}
	if len(s.cache) >= maxLeaves {
		for k := range s.cache {
			delete(s.cache, k)
			break
		}
	}
	s.cache[host] = c
	return c, nil
}
