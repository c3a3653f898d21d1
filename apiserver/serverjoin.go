package apiserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/everynode/everynode/client"
)

// ServerMembers is the servers' etcd cluster (the server package implements
// it over its embedded etcd).
type ServerMembers interface {
	// AddServer adds the named server as an etcd learner and answers with
	// the cluster's key material and members.
	AddServer(ctx context.Context, in client.ServerJoinRequest) (*client.ServerJoinResponse, error)
	// PromoteServer makes the named learner a voting member once it has
	// caught up.
	PromoteServer(ctx context.Context, name string) error
	// RemoveServer removes the named member; it refuses to remove the last
	// voting one.
	RemoveServer(ctx context.Context, name string) error
}

// errNotClustered answers a server join on a server whose etcd is not an
// embedded cluster member.
var errNotClustered = apierrors.NewBadRequest("this server does not run an embedded etcd cluster; start the first server with --cluster-init")

// serveServerJoin serves POST ServerJoinPath and ServerPromotePath (before
// authentication: the whole join token in the body is the credential).
// Only the cluster's own join token admits a server, never an agent-only
// (bootstrap) token: a server receives the CA key and the cluster secret.
func (j *JoinConfig) serveServerJoin(ctx context.Context, req *http.Request) (any, string, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxJoinBody+1))
	if err != nil || len(body) > maxJoinBody {
		return nil, "", errJoinRefused()
	}
	var in client.ServerJoinRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "", apierrors.NewBadRequest(fmt.Sprintf("server join request is not JSON {\"name\",\"peerURL\",\"joinToken\"}: %v", err))
	}
	if err := j.checkServerToken(ctx, in.JoinToken); err != nil {
		return nil, "", err
	}
	if msgs := validation.IsDNS1123Subdomain(in.Name); len(msgs) > 0 {
		return nil, "", apierrors.NewBadRequest(fmt.Sprintf("server name %q: %s", in.Name, strings.Join(msgs, "; ")))
	}
	if j.Servers == nil {
		return nil, "", errNotClustered
	}
	if req.URL.Path == client.ServerPromotePath {
		if err := j.Servers.PromoteServer(ctx, in.Name); err != nil {
			return nil, "", err
		}
		return struct{}{}, in.Name, nil
	}
	resp, err := j.Servers.AddServer(ctx, in)
	if err != nil {
		return nil, "", err
	}
	return resp, in.Name, nil
}

// checkServerToken accepts the cluster's whole join token (its current
// secret, rotated or derived) and nothing else.
func (j *JoinConfig) checkServerToken(ctx context.Context, token string) error {
	rest, ok := strings.CutPrefix(strings.TrimSpace(token), "K10")
	if !ok {
		return errJoinRefused()
	}
	hash, secret, ok := strings.Cut(rest, "::join:")
	if !ok {
		return errJoinRefused()
	}
	if _, _, boot := ParseBootstrapToken(secret); boot {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "servers"}, "",
			errors.New("an agent-only token (everynode token create) cannot join a server; use the first server's join-token file"))
	}
	if j.CAHash != "" && subtle.ConstantTimeCompare([]byte(strings.ToLower(hash)), []byte(j.CAHash)) != 1 {
		return errJoinRefused()
	}
	ok, err := j.checkSecret(ctx, secret)
	if err != nil {
		return err
	}
	if !ok {
		return errJoinRefused()
	}
	return nil
}

// serveRemoveServer removes a server from the etcd cluster (POST
// client.RemoveServerPath; the admin's).
func (s *Server) serveRemoveServer(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "create", "")
	if s.join == nil || s.join.Servers == nil {
		s.writeError(w, req, errNotClustered)
		return
	}
	var in client.RemoveServerRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, maxJoinBody)).Decode(&in); err != nil || in.Name == "" {
		s.writeError(w, req, apierrors.NewBadRequest("remove server request is not JSON {\"name\"}"))
		return
	}
	if err := s.join.Servers.RemoveServer(req.Context(), in.Name); err != nil {
		s.writeError(w, req, err)
		return
	}
	u, _ := UserFrom(req.Context())
	s.log.Info("server removed from the etcd cluster", "server", in.Name, "user", u.Name)
	writeJSON(w, http.StatusOK, in)
}
