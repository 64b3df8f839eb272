package netlab

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestWheel(t *testing.T) {
	name, b, err := BuildWheel()
	if err != nil {
		t.Fatal(err)
	}
	if name != "netlab_hello-1.0.0-py3-none-any.whl" {
		t.Fatalf("wheel name %q", name)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name], _ = io.ReadAll(rc)
		rc.Close()
	}
	record := string(files["netlab_hello-1.0.0.dist-info/RECORD"])
	lines := strings.Split(strings.TrimSpace(record), "\n")
	if len(lines) != len(files) {
		t.Fatalf("RECORD lists %d files, the wheel holds %d:\n%s", len(lines), len(files), record)
	}
	for _, line := range lines {
		f := strings.Split(line, ",")
		if len(f) != 3 {
			t.Fatalf("RECORD line %q", line)
		}
		body, ok := files[f[0]]
		if !ok {
			t.Fatalf("RECORD names %s, not in the wheel", f[0])
		}
		if strings.HasSuffix(f[0], "/RECORD") {
			continue
		}
		sum := sha256.Sum256(body)
		if want := fmt.Sprintf("sha256=%s", base64.RawURLEncoding.EncodeToString(sum[:])); f[1] != want || f[2] != fmt.Sprint(len(body)) {
			t.Fatalf("RECORD %q, want %s,%d", line, want, len(body))
		}
	}
	if !bytes.Contains(files["netlab_hello/__init__.py"], []byte(PythonGreeting)) {
		t.Fatalf("__init__.py: %q", files["netlab_hello/__init__.py"])
	}
	_, again, _ := BuildWheel()
	if !bytes.Equal(b, again) {
		t.Fatal("two builds of the wheel differ")
	}
}

func TestNPMRegistry(t *testing.T) {
	tgz, err := BuildNPMTarball()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixtures{tgz: tgz}
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		f.serveNPM(w, httptest.NewRequest(http.MethodGet, "http://reg.test"+path, nil))
		return w
	}
	w := get("/npm/" + NPMPackage)
	var doc struct {
		DistTags map[string]string `json:"dist-tags"`
		Versions map[string]struct {
			Dist struct{ Tarball, Shasum, Integrity string }
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatalf("packument: %v: %s", err, w.Body)
	}
	v, ok := doc.Versions[doc.DistTags["latest"]]
	if !ok {
		t.Fatalf("packument: no latest version: %s", w.Body)
	}
	if v.Dist.Tarball != "http://reg.test/npm/netlab-hello/-/netlab-hello-1.0.0.tgz" {
		t.Fatalf("tarball URL %q", v.Dist.Tarball)
	}
	body := get(strings.TrimPrefix(v.Dist.Tarball, "http://reg.test")).Body.Bytes()
	s512 := sha512.Sum512(body)
	if v.Dist.Integrity != "sha512-"+base64.StdEncoding.EncodeToString(s512[:]) {
		t.Fatal("the tarball does not match its integrity")
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	names := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		names[h.Name] = string(b)
	}
	if !strings.Contains(names["package/package.json"], `"name":"netlab-hello"`) || !strings.Contains(names["package/index.js"], NPMGreeting) {
		t.Fatalf("tarball: %v", names)
	}
	if w := get("/npm/left-pad"); w.Code != http.StatusNotFound {
		t.Fatalf("unknown package: %d", w.Code)
	}
}

func TestPyPIIndex(t *testing.T) {
	name, wheel, err := BuildWheel()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixtures{wheelName: name, wheel: wheel}
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		f.servePyPI(w, httptest.NewRequest(http.MethodGet, "https://pypi.test"+path, nil))
		return w
	}
	sum := sha256.Sum256(wheel)
	for _, p := range []string{"/simple/netlab-hello/", "/simple/NetLab_Hello/", "/simple/netlab.hello/"} {
		w := get(p)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "/files/"+name+"#sha256="+hex.EncodeToString(sum[:])) {
			t.Fatalf("%s: %d %s", p, w.Code, w.Body)
		}
	}
	if w := get("/simple/netlab-hello"); w.Code != http.StatusMovedPermanently {
		t.Fatalf("without the slash: %d", w.Code)
	}
	if w := get("/simple/requests/"); w.Code != http.StatusNotFound {
		t.Fatalf("unknown project: %d", w.Code)
	}
	if w := get("/files/" + name); !bytes.Equal(w.Body.Bytes(), wheel) {
		t.Fatal("the wheel file differs")
	}
	if w := get("/files/../../etc/passwd"); w.Code != http.StatusNotFound {
		t.Fatalf("a path outside the files: %d", w.Code)
	}
}

// TestDNS asks the lab's DNS handler over loopback (no namespace).
func TestDNS(t *testing.T) {
	l := &Lab{t: t, names: DefaultNames(), ttl: 7}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcpAddr := ln.Addr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc}, {Listener: ln}} {
		started := make(chan struct{})
		srv.Handler = dns.HandlerFunc(l.serveDNS)
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		defer srv.Shutdown()
	}
	ask := func(name string, qtype uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		r, err := dns.Exchange(m, pc.LocalAddr().String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	r := ask("ALLOWED.test.", dns.TypeAAAA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != "2001:2::1:1" || r.Answer[0].Header().Ttl != 7 || !r.Authoritative {
		t.Fatalf("allowed.test AAAA: %v", r)
	}
	if r := ask("v6only.test.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("v6only.test A: %v", r)
	}
	if r := ask("meta.test.", dns.TypeA); len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "169.254.169.254" {
		t.Fatalf("meta.test A: %v", r)
	}
	if r := ask("example.com.", dns.TypeA); r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
		t.Fatalf("example.com: %v", r)
	}
	if r := ask("allowed.test.", dns.TypeTXT); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("allowed.test TXT: %v", r)
	}
	var many []string
	for i := 1; i <= 60; i++ {
		many = append(many, fmt.Sprintf("198.18.2.%d", i))
	}
	l.AddName("many.test", many...)
	if r := ask("many.test.", dns.TypeA); !r.Truncated {
		t.Fatalf("60 A records over UDP without EDNS: not truncated (%d answers)", len(r.Answer))
	}
	m := new(dns.Msg)
	m.SetQuestion("many.test.", dns.TypeA)
	if r, _, err := (&dns.Client{Net: "tcp"}).Exchange(m, tcpAddr); err != nil || len(r.Answer) != 60 || r.Truncated {
		t.Fatalf("many.test over TCP: %v %v", r, err)
	}
	q := l.Queries()
	if len(q) != 7 || q[0] != (Query{Name: "allowed.test", Type: "AAAA", Rcode: "NOERROR"}) || q[3].Rcode != "NXDOMAIN" {
		t.Fatalf("queries: %+v", q)
	}
}
