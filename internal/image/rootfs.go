package image

// Rootfs is what the image store hands to a backend: the image's read-only
// layer directories, lowest first, and the parts of its config that
// decide how a process starts. Backends stack Layers with overlayfs; they
// never copy or modify them.
type Rootfs struct {
	// Ref is the normalised reference (e.g. index.docker.io/library/alpine:3.20).
	Ref string `json:"ref"`
	// Digest is the manifest digest ("sha256:…"); empty for the host image.
	Digest string `json:"digest,omitempty"`
	// Layers are absolute paths of unpacked layer directories, lowest first.
	Layers []string `json:"layers,omitempty"`
	// Host is true for the special image "host": the backend builds a
	// read-only root from the host's own /usr, /bin, /lib*, /etc (minus
	// secrets) instead of Layers.
	Host   bool   `json:"host,omitempty"`
	Config Config `json:"config"`
}

// Config is the runtime part of an OCI image config.
type Config struct {
	Env        []string `json:"env,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}
