package apiserver

import (
	"net/http"
	"strings"
)

// serverBlobsPath is images.ServerBlobsPath (apiserver does not import
// images' server side).
const serverBlobsPath = "/everynode/v1/server-blobs/"

// withServerBlobs hands serverBlobsPath to Config.ServerBlobs, which
// authenticates the calling server by its certificate, before token
// authentication.
func (s *Server) withServerBlobs(next http.Handler) http.Handler {
	if s.serverBlobs == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.HasPrefix(req.URL.Path, serverBlobsPath) {
			next.ServeHTTP(w, req)
			return
		}
		setScope(req.Context(), "server-blobs", "")
		s.serverBlobs.ServeHTTP(w, req)
	})
}
