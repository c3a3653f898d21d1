package images

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"os"
	"strings"
)

// PeerToken is the bearer token agents present to each other for blobs:
// an HMAC of the cluster's gossip key, which only the cluster's nodes and
// servers hold. It grants what a node credential grants at the servers'
// image store: reading image blobs, nothing else.
func PeerToken(clusterKey []byte) string {
	m := hmac.New(sha256.New, clusterKey)
	m.Write([]byte("everynode image peers v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// PeerHandler serves the verified blobs a Fetcher keeps in dir to peers
// presenting token, under BlobsPath (Range requests work). Anything else is
// 401 or 404.
func PeerHandler(dir, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		bearer, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" || subtle.ConstantTimeCompare([]byte(bearer), []byte(token)) != 1 {
			w.Header().Set("Connection", "close")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		d, _ := strings.CutPrefix(req.URL.Path, BlobsPath)
		if (req.Method != http.MethodGet && req.Method != http.MethodHead) || !isDigest(d) {
			http.NotFound(w, req)
			return
		}
		f, err := os.Open(blobFile(dir, d))
		if err != nil {
			http.NotFound(w, req)
			return
		}
		serveBlobFile(w, req, d, f)
	})
}

// serveBlobFile answers a blob request from f, which it closes: ranges
// (resumable fetches) and conditional requests by the digest as ETag.
func serveBlobFile(w http.ResponseWriter, req *http.Request, d string, f *os.File) {
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", `"`+d+`"`)
	http.ServeContent(w, req, "", fi.ModTime(), f)
}
