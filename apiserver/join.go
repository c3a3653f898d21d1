package apiserver

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/everynode/everynode/client"
)

// JoinPath is where agents exchange the cluster's join secret for their
// node credential (client.JoinPath).
const JoinPath = client.JoinPath

// maxJoinBody bounds a join request body.
const maxJoinBody = 16 << 10

// JoinSecrets is the key material the join endpoint needs (pki.Cluster
// implements it).
type JoinSecrets interface {
	// CheckJoinSecret reports, in constant time, whether s is the join
	// secret (or the whole join token).
	CheckJoinSecret(s string) bool
	// NodeToken is the bearer token of the named node.
	NodeToken(node string) string
	// GossipKey is the 32-byte gossip encryption key.
	GossipKey() []byte
}

// JoinConfig enables POST JoinPath.
type JoinConfig struct {
	// Secrets checks join secrets and makes node credentials. Required.
	Secrets JoinSecrets
	// Seeds returns the gossip addresses (host:port) of the servers' members
	// a joining agent should contact; nil means none.
	Seeds func() []string
	// APIServer returns the API's URL as the server knows it; nil means "".
	APIServer func() string
	// DataDir is named in the server's log when a join is refused, so the
	// operator knows where the join token is (never in the answer: the
	// caller is unauthenticated); empty means "<data-dir>".
	DataDir string
	// State remembers node identities, the rotated join secret and the
	// bootstrap tokens (NewStoreJoinState); nil: none of the three.
	State JoinState
	// CAHash is the hex SHA-256 of the CA certificate, as in join tokens:
	// a whole token with the rotated secret must carry it. Required with
	// State.
	CAHash string
	// WriteJoinToken, when set, is given the new join token after a
	// rotation (the server rewrites its join-token file).
	WriteJoinToken func(token string) error
	// Servers, when set, admits servers into the embedded etcd cluster
	// (POST client.ServerJoinPath, docs/ha.md).
	Servers ServerMembers
}

// JoinRequest and JoinResponse are the join's wire types, shared with the
// agents' side in package client.
type (
	JoinRequest  = client.JoinRequest
	JoinResponse = client.JoinResponse
)

// withJoin serves POST JoinPath (before authentication: the join secret in
// its body is the credential) when j is set, and passes everything else to
// next; other methods on JoinPath need a token like any path. The body is
// the one the server reads from a caller it does not know yet: it is cut at
// maxJoinBody bytes and joinBodyTimeout (docs/security.md §1).
// A refusal is a 401 that closes the connection, after the source's failure
// throttle (a refused join counts as a failed authentication), and names no
// file of the server.
func (s *Server) withJoin(j *JoinConfig, next http.Handler) http.Handler {
	if j == nil || j.Secrets == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		serverJoin := req.URL.Path == client.ServerJoinPath || req.URL.Path == client.ServerPromotePath
		if (req.URL.Path != JoinPath && !serverJoin) || req.Method != http.MethodPost {
			next.ServeHTTP(w, req)
			return
		}
		setScope(req.Context(), "join", "")
		if req.ContentLength > maxJoinBody {
			// Nothing that large is a join request: refuse it unread.
			s.log.Info("join refused", "remote", req.RemoteAddr, "err", "body too large", "bytes", req.ContentLength)
			s.refuse(w, req, errJoinRefused(), false)
			return
		}
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.joinTimeout))
		var resp any
		var node string
		var err error
		if serverJoin {
			resp, node, err = j.serveServerJoin(req.Context(), req)
		} else {
			resp, node, err = j.join(req.Context(), req)
		}
		if err != nil {
			if apierrors.IsUnauthorized(err) {
				// The operator learns where the token is; the caller does not.
				s.log.Info("join refused", "remote", req.RemoteAddr, "err", err,
					"hint", "copy "+filepath.Join(j.dataDir(), "join-token")+" from the server")
				s.refuse(w, req, err, true)
				return
			}
			s.log.Info("join refused", "remote", req.RemoteAddr, "err", err)
			s.writeError(w, req, err)
			return
		}
		s.log.Info("joined", "name", node, "server", serverJoin, "path", req.URL.Path, "remote", req.RemoteAddr)
		writeJSON(w, http.StatusOK, resp)
	})
}

// errJoinRefused is the answer to a join without the right secret. It
// names no path: whoever asks need not be the cluster's operator.
func errJoinRefused() error {
	return apierrors.NewUnauthorized("invalid join token; copy the join-token file from the server's data directory")
}

// checkSecret reports whether s (a bare join secret or a whole join
// token) admits an agent: the cluster's join secret — the rotated one once
// the secret has been rotated, else the one derived from the cluster's key
// material — or an unexpired bootstrap token.
func (j *JoinConfig) checkSecret(ctx context.Context, s string) (bool, error) {
	if s == "" {
		return false, nil
	}
	bare := s
	if rest, whole := strings.CutPrefix(s, "K10"); whole {
		hash, secret, found := strings.Cut(rest, "::join:")
		if !found {
			return false, nil
		}
		if j.State != nil && subtle.ConstantTimeCompare([]byte(strings.ToLower(hash)), []byte(j.CAHash)) != 1 {
			return false, nil
		}
		bare = secret
	}
	if j.State == nil {
		return j.Secrets.CheckJoinSecret(s), nil
	}
	if id, secret, ok := ParseBootstrapToken(bare); ok {
		tok, err := j.State.BootstrapToken(ctx, id)
		if err != nil {
			return false, errJoinUnavailable(err)
		}
		return bootstrapTokenValid(tok, id, secret, time.Now()), nil
	}
	rotated, err := j.State.JoinSecret(ctx)
	if err != nil {
		return false, errJoinUnavailable(err)
	}
	if rotated != "" {
		return subtle.ConstantTimeCompare([]byte(bare), []byte(rotated)) == 1, nil
	}
	return j.Secrets.CheckJoinSecret(bare), nil
}

// claim checks the joining machine's node password against the one the
// node's first join recorded (docs/security.md §4).
func (j *JoinConfig) claim(ctx context.Context, node, password string) error {
	if j.State == nil {
		return nil
	}
	if password == "" {
		return apierrors.NewBadRequest("join request has no nodePassword: the agent is older than the server; update it")
	}
	ok, err := j.State.ClaimNode(ctx, node, password)
	if err != nil {
		return errJoinUnavailable(err)
	}
	if !ok {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, node, fmt.Errorf(
			"the node name is held by another machine (this machine's node password does not match the one recorded when %q first joined); "+
				"if that machine is gone, an admin frees the name with \"everynode delete node %s\", else join this one under another --name", node, node))
	}
	return nil
}

// errJoinUnavailable hides a storage failure from the unauthenticated
// caller (the server's log has it).
func errJoinUnavailable(err error) error {
	return &joinUnavailable{err}
}

type joinUnavailable struct{ err error }

func (e *joinUnavailable) Error() string { return "join: " + e.err.Error() }

// Status implements apierrors.APIStatus: a 503 that names nothing.
func (e *joinUnavailable) Status() metav1.Status {
	return apierrors.NewServiceUnavailable("the server cannot check joins now; retry later").ErrStatus
}

func (j *JoinConfig) dataDir() string {
	if j.DataDir == "" {
		return "<data-dir>"
	}
	return j.DataDir
}

var nodeKind = schema.GroupKind{Kind: "Node"}

// join checks one request and builds the answer for the node it names.
func (j *JoinConfig) join(ctx context.Context, req *http.Request) (*JoinResponse, string, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxJoinBody+1))
	if err != nil {
		// Unauthenticated: the cause (a timeout, a reset) is the caller's own.
		return nil, "", errJoinRefused()
	}
	if len(body) > maxJoinBody {
		return nil, "", errJoinRefused()
	}
	var in JoinRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, "", apierrors.NewBadRequest(fmt.Sprintf("join request is not JSON {\"nodeName\",\"joinSecret\"}: %v", err))
		}
	}
	// The secret is checked first, so an unauthenticated caller learns
	// nothing, not even whether its node name would be valid.
	ok, err := j.checkSecret(ctx, in.JoinSecret)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, "", errJoinRefused()
	}
	if msgs := validation.IsDNS1123Subdomain(in.NodeName); len(msgs) > 0 {
		errs := field.ErrorList{field.Invalid(field.NewPath("nodeName"), in.NodeName, strings.Join(msgs, "; "))}
		return nil, "", apierrors.NewInvalid(nodeKind, in.NodeName, errs)
	}
	if err := j.claim(ctx, in.NodeName, in.NodePassword); err != nil {
		return nil, "", err
	}
	out := &JoinResponse{
		NodeToken:   j.Secrets.NodeToken(in.NodeName),
		GossipKey:   base64.StdEncoding.EncodeToString(j.Secrets.GossipKey()),
		GossipSeeds: []string{},
	}
	if j.Seeds != nil {
		out.GossipSeeds = append(out.GossipSeeds, j.Seeds()...)
	}
	if j.APIServer != nil {
		out.APIServer = j.APIServer()
	}
	return out, in.NodeName, nil
}

// serveRotateJoinToken rotates the cluster's join secret (POST
// client.RotateJoinTokenPath; the admin's, docs/security.md §4): agents
// that joined keep their credentials, new joins need the new token.
func (s *Server) serveRotateJoinToken(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "create", "") // authorized as "post" by withNonResourceAuthorization
	j := s.join
	if j == nil || j.State == nil {
		s.writeError(w, req, apierrors.NewMethodNotSupported(schema.GroupResource{}, "rotate the join token on this server"))
		return
	}
	secret, err := j.State.RotateJoinSecret(req.Context())
	if err != nil {
		s.writeError(w, req, apierrors.NewInternalError(err))
		return
	}
	token := "K10" + j.CAHash + "::join:" + secret
	if j.WriteJoinToken != nil {
		if err := j.WriteJoinToken(token); err != nil {
			s.log.Error("join token rotated but not written to the data dir", "err", err)
			s.writeError(w, req, apierrors.NewInternalError(fmt.Errorf("the join token was rotated but this server could not write its join-token file: %w", err)))
			return
		}
	}
	u, _ := UserFrom(req.Context())
	s.log.Info("join token rotated", "user", u.Name)
	writeJSON(w, http.StatusOK, client.RotateJoinTokenResponse{JoinToken: token})
}
