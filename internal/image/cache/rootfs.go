package cache

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
	Host bool `json:"host,omitempty"`
	// UserXattr is true when opaque directories in Layers are marked only
	// with user.overlay.* xattrs (a store unpacked without root): mount
	// the overlay with the "userxattr" option. When false the layers carry
	// both trusted.overlay.* and user.overlay.* marks and either mount
	// mode works.
	UserXattr bool `json:"user_xattr,omitempty"`
	// IDMap is the ownership shift the layers were unpacked with (zero:
	// files keep the tar's ids as root, or belong to the caller rootless).
	IDMap  IDMap  `json:"id_map,omitzero"`
	Config Config `json:"config"`
}

// Config is the runtime part of an OCI image config.
type Config struct {
	// Env is the image's environment, KEY=VALUE.
	Env []string `json:"env,omitempty"`
	// Entrypoint and Cmd make the default command (Entrypoint+Cmd).
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// WorkingDir is the default working directory ("" means "/").
	WorkingDir string `json:"working_dir,omitempty"`
	// User is the default "user[:group]" (name or id; "" means root).
	User string `json:"user,omitempty"`
}
