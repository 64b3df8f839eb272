//go:build !linux

package peercred

import (
	"errors"
	"syscall"
)

// Self stands for this process's namespaces; outside Linux it knows
// none.
type Self struct{}

// ReadSelf returns the zero Self.
func ReadSelf() Self { return Self{} }

// Of is unsupported outside Linux: every peer is a stranger.
func Of(c syscall.Conn) (Peer, error) { return ReadSelf().Of(c) }

// Of is unsupported outside Linux: every peer is a stranger.
func (Self) Of(c syscall.Conn) (Peer, error) {
	return Peer{UID: -1}, errors.New("peer credentials are read on Linux only")
}
