package apiserver

import (
	"fmt"
	"net/http"

	"github.com/everynode/everynode/ui"
)

// dashboard serves the fleet dashboard (package ui, docs/dashboard.md) at
// /ui/ in front of api, the authenticated API: its shell and assets are
// open to anyone and hold no cluster data; its /ui/api/ requests reach api
// with the session's token as their bearer token, so they are
// authenticated, throttled and authorized as any other API request.
func (s *Server) dashboard(api http.Handler) (http.Handler, error) {
	d, err := ui.New(ui.Config{API: api, Now: s.now, Authenticate: func(req *http.Request, token string) (string, bool) {
		name, _, ok := s.authn.AuthenticateToken(token)
		if !ok || name == "" {
			s.throttle.wait(req.Context(), req.RemoteAddr)
			return "", false
		}
		return name, true
	}})
	if err != nil {
		return nil, fmt.Errorf("apiserver: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if ui.Owns(req.URL.Path) {
			d.ServeHTTP(w, req)
			return
		}
		api.ServeHTTP(w, req)
	}), nil
}
