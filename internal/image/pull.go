package image

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Pull fetches ref from its registry (even if cached), unpacks the layers
// the store lacks, tags it, and returns its Rootfs. A multi-arch index
// resolves to Options.Platform or the host's platform. Errors wrap
// ErrUnreachable when the registry cannot be reached and ErrNotFound
// when it does not know the image.
func (s *Store) Pull(ctx context.Context, ref string) (Rootfs, error) {
	if IsHost(ref) {
		return HostRootfs(), nil
	}
	r, insecure, err := parseRef(ref, s.opts.InsecureRegistries)
	if err != nil {
		return Rootfs{}, err
	}
	rec, err := s.pull(ctx, ref, r, insecure)
	if err != nil {
		return Rootfs{}, s.pullError(ctx, ref, r, err)
	}
	sn, err := s.current()
	if err != nil {
		return Rootfs{}, err
	}
	paths := sn.LayerPaths[rec.Digest]
	if paths == nil {
		return Rootfs{}, fmt.Errorf("image store: %s vanished from the index after pulling", r.Name())
	}
	return s.rootfsOf(r.Name(), rec, paths), nil
}

func (s *Store) remoteOptions(ctx context.Context, insecure bool) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(s.keychain),
		remote.WithPlatform(s.platform),
		remote.WithTransport(s.httpTransport(insecure)),
		remote.WithUserAgent("agentkernel"),
	}
}

// httpTransport is the transport for registries; insecure registries get
// one that does not verify TLS certificates.
func (s *Store) httpTransport(insecure bool) http.RoundTripper {
	s.transportOnce.Do(func() {
		if s.opts.Transport != nil {
			s.transport, s.insecureTr = s.opts.Transport, s.opts.Transport
			return
		}
		t := &http.Transport{
			Proxy: http.ProxyFromEnvironment,
			DialContext: (&net.Dialer{
				Timeout:   10 * time.Second,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
		it := t.Clone()
		it.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // only for registries the user marked insecure, and loopback
		s.transport, s.insecureTr = t, it
	})
	if insecure {
		return s.insecureTr
	}
	return s.transport
}

func (s *Store) pull(ctx context.Context, display string, r name.Reference, insecure bool) (*imageRecord, error) {
	opts := s.remoteOptions(ctx, insecure)
	s.log.Debug("resolving image", "ref", r.Name())
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return nil, err
	}
	var img v1.Image
	var indexDigest string
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		child, err := pickManifest(im, s.platform)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name(), err)
		}
		indexDigest = desc.Digest.String()
		if rec, ok, err := s.retag(ctx, child.Digest, indexDigest, r.Name()); ok || err != nil {
			return rec, err
		}
		if img, err = idx.Image(child.Digest); err != nil {
			return nil, err
		}
	case desc.MediaType.IsImage():
		if rec, ok, err := s.retag(ctx, desc.Digest, "", r.Name()); ok || err != nil {
			return rec, err
		}
		if img, err = desc.Image(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%s: unsupported manifest type %s", r.Name(), desc.MediaType)
	}
	src, err := sourceFromImage(img)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name(), err)
	}
	src.display, src.verb, src.source = display, "pulling", "pull"
	src.indexDigest = indexDigest
	return s.storeImage(ctx, src, []string{r.Name()})
}

// retag handles a pull whose manifest is already complete in the store:
// it only (re)points the tag.
func (s *Store) retag(ctx context.Context, digest v1.Hash, indexDigest, tag string) (*imageRecord, bool, error) {
	sn, err := s.current()
	if err != nil {
		return nil, false, err
	}
	rec := sn.Index.Images[digest.String()]
	if rec == nil {
		return nil, false, nil
	}
	for _, p := range sn.LayerPaths[rec.Digest] {
		if !exists(p) {
			return nil, false, nil
		}
	}
	var out *imageRecord
	err = s.updateIndex(ctx, func(idx *indexFile) error {
		out = idx.Images[digest.String()]
		if out == nil {
			return fmt.Errorf("image %s vanished from the index", digest)
		}
		if indexDigest != "" {
			out.IndexDigest = indexDigest
		}
		out.Dangling = false
		idx.SetTag(tag, out.Digest)
		return nil
	})
	return out, err == nil, err
}

// sourceFromImage describes a go-containerregistry image (from a
// registry) for storeImage.
func sourceFromImage(img v1.Image) (*imageSource, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	src := &imageSource{manifest: raw, config: cfg}
	for _, l := range m.Layers {
		if !isLayerType(l.MediaType) {
			return nil, fmt.Errorf("not a container image: layer media type %s", l.MediaType)
		}
		layer, err := img.LayerByDigest(l.Digest)
		if err != nil {
			return nil, err
		}
		src.layers = append(src.layers, layerJob{
			digest:    l.Digest,
			size:      l.Size,
			mediaType: string(l.MediaType),
			open:      layer.Compressed,
			verified:  true,
		})
	}
	return src, nil
}

// pickManifest chooses the index entry for platform want, preferring an
// exact variant match.
func pickManifest(im *v1.IndexManifest, want v1.Platform) (v1.Descriptor, error) {
	var best *v1.Descriptor
	var have []string
	for i := range im.Manifests {
		d := &im.Manifests[i]
		if d.Platform == nil || d.Platform.OS == "unknown" {
			continue // attestations and the like
		}
		have = append(have, d.Platform.String())
		if !d.MediaType.IsImage() || !d.Platform.Satisfies(want) {
			continue
		}
		if best == nil || (d.Platform.Variant == want.Variant && best.Platform.Variant != want.Variant) {
			best = d
		}
	}
	if best == nil {
		return v1.Descriptor{}, fmt.Errorf("%w: no image for platform %s in the index (it has: %s)",
			ErrNotFound, want.String(), strings.Join(have, ", "))
	}
	return *best, nil
}

// pullError classifies a pull failure: the caller's cancellation as is,
// an unreachable registry as ErrUnreachable, a registry 404 as
// ErrNotFound.
func (s *Store) pullError(ctx context.Context, display string, r name.Reference, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("pulling %s: %w (%w)", display, ctx.Err(), err)
	}
	if isUnreachable(err) {
		return fmt.Errorf("pulling %s: %w: %s: %w", display, ErrUnreachable, r.Context().RegistryStr(), err)
	}
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("pulling %s: %w: %w", display, ErrNotFound, err)
	}
	return fmt.Errorf("pulling %s: %w", display, err)
}

// isUnreachable reports whether err says the registry could not be
// reached at all (as opposed to answering with an error).
func isUnreachable(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	for _, e := range []error{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT, syscall.EHOSTDOWN, syscall.ENETDOWN} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}
