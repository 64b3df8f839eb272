package envblock

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	env := []string{"A=b", "TOKEN=line1\nline2\r\n", "EMPTY=", "EQ=a=b=c", "UTF=é\x01\xff"}
	b, err := Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(bytes.NewReader(b))
	if err != nil || !reflect.DeepEqual(got, env) {
		t.Fatalf("Read = %q, %v; want %q", got, err, env)
	}
	// No entries: a block of its own, read as none.
	b, _ = Encode(nil)
	if got, err := Read(bytes.NewReader(b)); err != nil || len(got) != 0 {
		t.Fatalf("empty block: %q, %v", got, err)
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, e := range []string{"NOEQ", "=v", "A=b\x00c", "", "K\x00=v"} {
		if _, err := Encode([]string{"OK=1", e}); err == nil {
			t.Errorf("Encode(%q) passed", e)
		}
	}
	if _, err := Encode([]string{"BIG=" + strings.Repeat("x", MaxSize)}); err == nil {
		t.Error("Encode of more than MaxSize passed")
	}
	// An error names the key, never the value.
	_, err := Encode([]string{"SECRET=s3cr3t\x00x"})
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("error %v repeats the value", err)
	}
}

// block is a hand-made block of payload with length n.
func block(n uint32, payload string) []byte {
	b := []byte(Magic)
	b = binary.BigEndian.AppendUint32(b, n)
	return append(b, payload...)
}

func TestReadHostile(t *testing.T) {
	cases := map[string][]byte{
		"empty stdin":      nil,
		"not a block":      []byte("echo hello\n"),
		"short magic":      []byte("AKE"),
		"magic, no length": []byte(Magic + "\x00\x00"),
		"huge length":      block(0xffffffff, "A=b\x00"),
		"just over max":    block(MaxSize+1, ""),
		"cut payload":      block(100, "A=b\x00"),
		"missing NUL":      block(3, "A=b"),
		"key without =":    block(4, "AB\x00"),
		"empty key":        block(3, "=b\x00"),
		"empty entry":      block(5, "A=b\x00\x00"),
		"bad second entry": block(8, "A=b\x00NOQ\x00"),
		"wrong magic":      append([]byte("AKENV2\x00"), block(4, "A=b\x00")[len(Magic):]...),
	}
	for name, in := range cases {
		if env, err := Read(bytes.NewReader(in)); err == nil {
			t.Errorf("%s: Read = %q, want an error", name, env)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestReadHugeLengthAllocatesNothing: a length over MaxSize is refused
// before any payload is allocated or read.
func TestReadHugeLengthAllocatesNothing(t *testing.T) {
	r := &countReader{r: bytes.NewReader(block(0xfffffff0, strings.Repeat("x", 1000)))}
	if _, err := Read(r); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("err = %v", err)
	}
	if r.n != len(Magic)+4 {
		t.Fatalf("read %d bytes, want the header's %d alone", r.n, len(Magic)+4)
	}
}

type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestReadNoOverRead: through a real pipe that holds the block and more
// (written in one piece, so a buffered reader would take it all), Read
// leaves the first byte after the block as the pipe's next.
func TestReadNoOverRead(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, _ := Encode([]string{"A=1", "B=two\nlines"})
	rest := "the command's own stdin\x00\n" + strings.Repeat("y", 10000)
	go func() {
		w.Write(append(b, rest...))
		w.Close()
	}()
	env, err := Read(r)
	if err != nil || !reflect.DeepEqual(env, []string{"A=1", "B=two\nlines"}) {
		t.Fatalf("Read = %q, %v", env, err)
	}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != rest {
		t.Fatalf("after the block: %d bytes %q…, want %d", len(got), got[:min(len(got), 30)], len(rest))
	}
	// An empty stdin after the block.
	r2, w2, _ := os.Pipe()
	defer r2.Close()
	w2.Write(b)
	w2.Close()
	if _, err := Read(r2); err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(r2); len(got) != 0 {
		t.Fatalf("after the block: %q", got)
	}
}

// TestFilter: the block waits for Ready, which is taken out of the
// output wherever it falls, also split across writes.
func TestFilter(t *testing.T) {
	var out bytes.Buffer
	f := NewFilter(&out, []byte("BLOCK"), strings.NewReader("stdin"))
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(f.Stdin())
		got <- string(b)
	}()
	w := f.Writer()
	w.Write([]byte("warning\n" + Ready[:4]))
	select {
	case s := <-got:
		t.Fatalf("stdin read %q before Ready", s)
	case <-time.After(50 * time.Millisecond):
	}
	w.Write([]byte(Ready[4:] + "output"))
	if s := <-got; s != "BLOCKstdin" {
		t.Fatalf("stdin = %q", s)
	}
	w.Write([]byte(Ready))
	f.Close()
	if out.String() != "warning\noutput"+Ready {
		t.Fatalf("output = %q", out.String())
	}
}

// TestFilterNoReady: a command that ends without Ready gets no block
// (stdin reads EOF once closed), and its output is all written.
func TestFilterNoReady(t *testing.T) {
	var out bytes.Buffer
	f := NewFilter(&out, []byte("SECRET"), strings.NewReader("x"))
	var wg sync.WaitGroup
	wg.Add(1)
	var got []byte
	go func() {
		defer wg.Done()
		got, _ = io.ReadAll(f.Stdin())
	}()
	f.Writer().Write([]byte("unknown flag: --env-stdin\n\x1b]53"))
	f.Close()
	wg.Wait()
	if len(got) != 0 {
		t.Fatalf("stdin gave %q without Ready", got)
	}
	if out.String() != "unknown flag: --env-stdin\n\x1b]53" {
		t.Fatalf("output = %q", out.String())
	}
}
