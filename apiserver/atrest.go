package apiserver

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/client"
)

// serveRotateEncryptionKey rotates the key Secrets are encrypted under in
// etcd (POST client.RotateEncryptionKeyPath; the admin's, docs/security.md):
// a new key, every Secret re-encrypted under it, the old key retired.
func (s *Server) serveRotateEncryptionKey(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "create", "") // authorized as "post" by withNonResourceAuthorization
	res, err := s.store.st.RotateEncryptionKey(req.Context())
	if err != nil {
		s.log.Error("secrets encryption key rotation failed", "err", err)
		s.writeError(w, req, apierrors.NewInternalError(err))
		return
	}
	u, _ := UserFrom(req.Context())
	s.log.Info("secrets encryption key rotated", "user", u.Name, "key", res.NewKey, "retired", res.OldKeys, "secrets", res.Secrets)
	writeJSON(w, http.StatusOK, client.RotateEncryptionKeyResponse{NewKey: res.NewKey, RetiredKeys: res.OldKeys, Reencrypted: res.Secrets})
}
