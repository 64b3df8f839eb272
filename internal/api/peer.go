package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// keyMatches reports whether r carries one of the server's API keys
// (constant-time), for a unix peer of the server's uid outside its
// namespaces, which guard lets in only with a key.
func (s *Server) keyMatches(r *http.Request) bool {
	h := r.Header["Authorization"]
	if len(h) == 0 {
		return false
	}
	token, ok := strings.CutPrefix(h[0], "Bearer ")
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	match := 0
	for i := range s.keys {
		match |= subtle.ConstantTimeCompare(sum[:], s.keys[i][:])
	}
	return match == 1
}
