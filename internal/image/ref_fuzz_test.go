package image

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/agentkernel/agentkernel/internal/image/cache"
)

// refSeeds are image references of every shape: short Docker Hub names,
// registries with ports, IPv6, digests, bare digests, the host image and
// broken ones.
var refSeeds = []string{
	"alpine", "alpine:3.20", "library/alpine:3.20", "docker.io/alpine", "index.docker.io/library/alpine:latest",
	"localhost:5000/team/tool:1", "127.0.0.1:5000/x", "[::1]:5000/x:y", "registry.example.com/a/b/c:v1.2_3-4",
	"alpine@sha256:" + strings.Repeat("ab", 32), "alpine:3.20@sha256:" + strings.Repeat("0", 64),
	"sha256:" + strings.Repeat("a", 64), "sha256:0123456789ab", "host", "host:latest", "HOST", "host:1",
	"Alpine", "alpine:", ":tag", "a//b", "a:b:c", "/alpine", "alpine@sha256:short", "a b", "\x00", "",
	strings.Repeat("a", 300), "localhost/x", "LOCALHOST:5000/x", "ghcr.io/owner/repo:tag",
}

// FuzzNormalizeRef: the canonical form is idempotent, fully qualified
// (it parses under strict validation to itself), keeps the tag or digest
// it was given ("latest" when none), and the host image is always
// "host". cache.Normalize, which gives everyday references their keys
// (in 'agentkernel run' and here), answers what go-containerregistry's
// parser answers wherever it answers, and the forms it declines get
// go-containerregistry's answer.
func FuzzNormalizeRef(f *testing.F) {
	for _, s := range refSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		n, err := NormalizeRef(ref)
		if IsHost(ref) {
			if err != nil || n != HostRef {
				t.Fatalf("NormalizeRef(%q) = %q, %v; want the host image", ref, n, err)
			}
			return
		}
		ggcr, gerr := canonicalName(ref)
		if c, ok := cache.Normalize(ref); ok {
			if gerr != nil || c != ggcr {
				t.Fatalf("cache.Normalize(%q) = %q but go-containerregistry reads %q, %v", ref, c, ggcr, gerr)
			}
		} else if (err == nil) != (gerr == nil) || n != ggcr {
			t.Fatalf("NormalizeRef(%q) = %q, %v but go-containerregistry reads %q, %v", ref, n, err, ggcr, gerr)
		}
		if err != nil {
			if n != "" || !strings.HasPrefix(err.Error(), "image reference ") {
				t.Fatalf("NormalizeRef(%q) = %q, %v", ref, n, err)
			}
			return
		}
		if n == "" || n == HostRef || strings.ContainsAny(n, " \t\r\n\x00") {
			t.Fatalf("NormalizeRef(%q) = %q", ref, n)
		}
		again, err := NormalizeRef(n)
		if err != nil || again != n {
			t.Fatalf("NormalizeRef(%q) = %q, which normalises to %q, %v", ref, n, again, err)
		}
		strict, err := name.ParseReference(n, name.StrictValidation)
		if err != nil || strict.Name() != n {
			t.Fatalf("NormalizeRef(%q) = %q is not fully qualified: %v", ref, n, err)
		}
		// The tag or digest the user gave survives.
		if i := strings.LastIndex(ref, "@"); i >= 0 {
			if !strings.HasSuffix(n, ref[i:]) {
				t.Fatalf("NormalizeRef(%q) = %q lost the digest", ref, n)
			}
		} else if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") && i >= 0 {
			if !strings.HasSuffix(n, ref[i:]) {
				t.Fatalf("NormalizeRef(%q) = %q lost the tag", ref, n)
			}
		} else if !strings.HasSuffix(n, ":latest") {
			t.Fatalf("NormalizeRef(%q) = %q: no tag should mean latest", ref, n)
		}
		// Registry and repository: the repository part is lowercase and
		// the registry is explicit.
		repo := strict.Context()
		if repo.RegistryStr() == "" || repo.RepositoryStr() != strings.ToLower(repo.RepositoryStr()) {
			t.Fatalf("NormalizeRef(%q) = %q: registry %q repository %q", ref, n, repo.RegistryStr(), repo.RepositoryStr())
		}
	})
}
