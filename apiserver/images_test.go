package apiserver

import (
	"net/http"
	"strings"
	"testing"

	"github.com/everynode/everynode/images"
)

// Attack: the image store is the admins' to write and the nodes' to read.
// A node cannot load or remove an image; an authenticated user who is
// neither admin nor node can do nothing with it, not even read a blob.
func TestImageStoreAuthorization(t *testing.T) {
	st, err := images.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withRBAC, func(c *Config) {
		c.Images = images.Handler(st, nil, nil, nil)
		c.Authenticator = tokens{
			adminToken: {Name: "admin", Groups: []string{mastersGroup}},
			userToken:  {Name: "someone", Groups: []string{authenticatedGroup}},
			n1Token:    {Name: "system:node:n1", Groups: []string{nodesGroup, authenticatedGroup}},
		}
	})
	if err := e.s.EnsureBootstrapPolicy(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	blob := images.BlobsPath + "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		token, method, path string
		want                int
	}{
		{n1Token, "GET", images.ImagesPath, http.StatusOK},
		{n1Token, "GET", blob, http.StatusNotFound}, // allowed, absent
		{n1Token, "POST", images.ImagesPath, http.StatusForbidden},
		{n1Token, "DELETE", images.ImagesPath + "?name=app:1", http.StatusForbidden},
		{userToken, "GET", images.ImagesPath, http.StatusForbidden},
		{userToken, "GET", blob, http.StatusForbidden},
		{userToken, "POST", images.ImagesPath, http.StatusForbidden},
		{userToken, "DELETE", images.ImagesPath + "?name=app:1", http.StatusForbidden},
		{"-", "GET", images.ImagesPath, http.StatusUnauthorized},
		{"", "GET", images.ImagesPath, http.StatusOK},
		{"", "POST", images.ImagesPath, http.StatusBadRequest}, // admin, empty body
	} {
		if r := e.do(req{method: tc.method, path: tc.path, token: tc.token, contentType: "application/x-tar"}); r.code != tc.want {
			t.Errorf("%s %s as %q: %d, want %d: %s", tc.method, tc.path, tc.token, r.code, tc.want, r.body)
		}
	}
}
