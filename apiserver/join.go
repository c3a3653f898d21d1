package apiserver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// JoinPath is where agents exchange the cluster's join secret for their
// node credential. It is served without a bearer token: the secret is the
// credential.
const JoinPath = "/everynode/v1/join"

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
	// DataDir is named in the refusal message, so the person at the agent
	// knows where the join token is; empty means "<data-dir>".
	DataDir string
}

// JoinRequest is the body of POST JoinPath.
type JoinRequest struct {
	NodeName   string `json:"nodeName"`
	JoinSecret string `json:"joinSecret"`
}

// JoinResponse is the answer to an accepted join. Nothing is registered by
// the join itself: the agent registers its Node with NodeToken.
type JoinResponse struct {
	// NodeToken is the node's bearer token (user system:node:<name>, group system:nodes).
	NodeToken string `json:"nodeToken"`
	// GossipKey is the gossip encryption key, base64 (standard encoding).
	GossipKey string `json:"gossipKey"`
	// GossipSeeds are the servers' gossip addresses.
	GossipSeeds []string `json:"gossipSeeds"`
	// APIServer is the API URL as the server knows it.
	APIServer string `json:"apiServer"`
}

// withJoin serves POST JoinPath (before authentication) when j is set, and
// passes everything else to next.
func (s *Server) withJoin(j *JoinConfig, next http.Handler) http.Handler {
	if j == nil || j.Secrets == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != JoinPath {
			next.ServeHTTP(w, req)
			return
		}
		setScope(req.Context(), "join", "")
		if req.Method != http.MethodPost {
			s.writeError(w, req, apierrors.NewMethodNotSupported(joinResource, strings.ToLower(req.Method)))
			return
		}
		resp, node, err := j.join(req)
		if err != nil {
			s.log.Info("join refused", "remote", req.RemoteAddr, "err", err)
			s.writeError(w, req, err)
			return
		}
		s.log.Info("node joined", "node", node, "remote", req.RemoteAddr)
		writeJSON(w, http.StatusOK, resp)
	})
}

var (
	joinResource = schema.GroupResource{Group: "everynode.io", Resource: "join"}
	nodeKind     = schema.GroupKind{Kind: "Node"}
)

// join checks one request and builds the answer for the node it names.
func (j *JoinConfig) join(req *http.Request) (*JoinResponse, string, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxJoinBody+1))
	if err != nil {
		return nil, "", apierrors.NewBadRequest(fmt.Sprintf("read join request: %v", err))
	}
	if len(body) > maxJoinBody {
		return nil, "", apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("join request over %d bytes", maxJoinBody))
	}
	var in JoinRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, "", apierrors.NewBadRequest(fmt.Sprintf("join request is not JSON {\"nodeName\",\"joinSecret\"}: %v", err))
		}
	}
	// The secret is checked first, so an unauthenticated caller learns
	// nothing, not even whether its node name would be valid.
	if in.JoinSecret == "" || !j.Secrets.CheckJoinSecret(in.JoinSecret) {
		dir := j.DataDir
		if dir == "" {
			dir = "<data-dir>"
		}
		return nil, "", apierrors.NewUnauthorized(fmt.Sprintf("invalid join token; copy %s/join-token from the server", strings.TrimRight(dir, "/")))
	}
	if msgs := validation.IsDNS1123Subdomain(in.NodeName); len(msgs) > 0 {
		errs := field.ErrorList{field.Invalid(field.NewPath("nodeName"), in.NodeName, strings.Join(msgs, "; "))}
		return nil, "", apierrors.NewInvalid(nodeKind, in.NodeName, errs)
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
