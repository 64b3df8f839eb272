package api

import (
	"net/http"
)

// doctor answers GET /doctor: the host's checks and the isolation runs
// get (package doctor's Report, through Options.Doctor), 200 even when
// a check is an error ("healthy" says so); 404 when the server has no
// doctor.
func (s *Server) doctor(w http.ResponseWriter, r *http.Request) {
	if s.opts.Doctor == nil {
		writeErr(w, http.StatusNotFound, "Not found")
		return
	}
	writeData(w, http.StatusOK, s.opts.Doctor(r))
}
