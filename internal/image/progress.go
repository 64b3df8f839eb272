package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
)

// progress reports one image transfer: bars per layer on a terminal, a
// start and an end line otherwise, nothing when quiet.
type progress struct {
	ctx     context.Context
	w       io.Writer
	verb    string
	display string
	start   time.Time
	bytes   atomic.Int64
	layers  int
	bars    *mpb.Progress
}

func (s *Store) newProgress(ctx context.Context, verb, display string) *progress {
	p := &progress{ctx: ctx, verb: verb, display: display, start: time.Now()}
	if s.opts.Progress != nil && !s.opts.Quiet {
		p.w = s.opts.Progress
	}
	return p
}

// isTerminal reports whether w is a terminal that bars can be drawn on
// (one with a width: a pty nobody sized gets plain lines).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false
	}
	width, _, err := term.GetSize(int(f.Fd()))
	return err == nil && width > 0
}

func (p *progress) begin(layers int, size int64) {
	p.layers = layers
	if p.w == nil || layers == 0 {
		return
	}
	fmt.Fprintf(p.w, "%s %s: %d %s, %s\n", p.verb, p.display, layers, plural(layers, "layer", "layers"), HumanSize(size))
	if isTerminal(p.w) {
		p.bars = mpb.NewWithContext(p.ctx, mpb.WithOutput(p.w), mpb.WithWidth(32), mpb.WithRefreshRate(120*time.Millisecond))
	}
}

// layer returns a wrapper for the layer's byte stream and a function to
// call when the layer is done.
func (p *progress) layer(job layerJob) (func(io.Reader) io.Reader, func(error)) {
	count := func(r io.Reader) io.Reader { return &countingReader{r: r, n: &p.bytes} }
	if p.bars == nil {
		return count, func(error) {}
	}
	total := job.size
	if total <= 0 {
		total = 0
	}
	bar := p.bars.AddBar(total,
		mpb.PrependDecorators(decor.Name(job.shortName(), decor.WC{C: decor.DindentRight | decor.DextraSpace})),
		mpb.AppendDecorators(
			decor.OnComplete(decor.CountersKiloByte("% .1f / % .1f", decor.WC{W: 20}), "done"),
		),
	)
	wrap := func(r io.Reader) io.Reader { return bar.ProxyReader(count(r)) }
	done := func(err error) {
		if err != nil {
			bar.Abort(false)
			return
		}
		bar.SetTotal(-1, true)
	}
	return wrap, done
}

func (p *progress) end(err error) {
	if p.bars != nil {
		if err != nil {
			p.bars.Shutdown()
		} else {
			p.bars.Wait()
		}
	}
	if p.w == nil || p.layers == 0 || err != nil {
		return
	}
	d := time.Since(p.start)
	n := p.bytes.Load()
	rate := ""
	if d > 0 && n > 0 {
		rate = fmt.Sprintf(", %s/s", HumanSize(int64(float64(n)/d.Seconds())))
	}
	fmt.Fprintf(p.w, "%s: done in %s (%s%s)\n", p.display, d.Round(10*time.Millisecond), HumanSize(n), rate)
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// HumanSize formats a byte count with decimal units as docker does
// ("3.1 MB").
func HumanSize(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"kB", "MB", "GB", "TB", "PB"} {
		f /= unit
		if f < unit {
			if f < 10 {
				return fmt.Sprintf("%.1f %s", f, u)
			}
			return fmt.Sprintf("%.0f %s", f, u)
		}
	}
	return fmt.Sprintf("%.0f EB", f/unit)
}
