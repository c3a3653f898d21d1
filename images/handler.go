package images

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strings"
)

// List is the answer to GET ImagesPath and POST ImagesPath.
type List struct {
	Items []Image `json:"items"`
}

// Handler serves s under ImagesPath and BlobsPath. It does no
// authentication or authorization: mount it behind the API server's, which
// lets admins write and nodes read (docs/security.md).
//
// holders (may be nil) names the nodes that have an image, so an agent
// fetches from its peers rather than from the servers.
//
// peers (may be nil), with several servers, fetches a blob that an image
// names but that was loaded on another server before it is served.
func Handler(s *Store, log *slog.Logger, holders func(ctx context.Context, name string) []Holder, peers *ServerPeers) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{s: s, log: log, holders: holders, peers: peers}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+ImagesPath, h.get)
	mux.HandleFunc("POST "+ImagesPath, h.load)
	mux.HandleFunc("DELETE "+ImagesPath, h.remove)
	mux.HandleFunc("GET "+BlobsPath+"{digest}", h.blob)
	mux.HandleFunc("HEAD "+BlobsPath+"{digest}", h.blob)
	return mux
}

type handler struct {
	s       *Store
	log     *slog.Logger
	holders func(ctx context.Context, name string) []Holder
	peers   *ServerPeers
}

// servers returns where the blobs are, when servers share the store; a
// failure only leaves the column out.
func (h *handler) servers(ctx context.Context) []ServerBlobs {
	hs, err := h.s.Holders(ctx)
	if err != nil {
		h.log.Warn("cannot read which servers hold which image blobs", "err", err)
	}
	return hs
}

func (h *handler) get(w http.ResponseWriter, req *http.Request) {
	if ref := req.URL.Query().Get("name"); ref != "" {
		im, err := h.s.Get(ref)
		if err != nil {
			h.fail(w, err)
			return
		}
		if h.holders != nil {
			im.Holders = h.holders(req.Context(), im.Name)
		}
		im = im.withServers(h.servers(req.Context()))
		writeJSON(w, http.StatusOK, im)
		return
	}
	ims, err := h.s.List()
	if err != nil {
		h.fail(w, err)
		return
	}
	if hs := h.servers(req.Context()); len(hs) > 0 {
		for i := range ims {
			ims[i] = ims[i].withServers(hs)
		}
	}
	writeJSON(w, http.StatusOK, List{Items: ims})
}

func (h *handler) load(w http.ResponseWriter, req *http.Request) {
	ims, err := h.s.Load(req.Body)
	if err != nil {
		h.fail(w, err)
		return
	}
	for _, im := range ims {
		h.log.Info("image loaded", "image", im.Name, "platforms", im.PlatformList())
	}
	writeJSON(w, http.StatusCreated, List{Items: ims})
}

func (h *handler) remove(w http.ResponseWriter, req *http.Request) {
	ref := req.URL.Query().Get("name")
	if ref == "" {
		writeStatus(w, http.StatusBadRequest, "name the image to remove: ?name=REF")
		return
	}
	if err := h.s.Remove(ref); err != nil {
		h.fail(w, err)
		return
	}
	h.log.Info("image removed", "image", ref)
	w.WriteHeader(http.StatusNoContent)
}

// blob serves one blob with http.ServeContent: Range and If-Range
// requests work, so an interrupted download resumes where it stopped. The
// digest is the ETag.
func (h *handler) blob(w http.ResponseWriter, req *http.Request) {
	d := req.PathValue("digest")
	var f *os.File
	var err error
	if h.peers != nil {
		f, err = h.peers.openOrFetch(req.Context(), d)
	} else {
		f, err = h.s.OpenBlob(d)
	}
	if err != nil {
		h.fail(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		h.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", `"`+d+`"`)
	w.Header().Set("Docker-Content-Digest", d)
	http.ServeContent(w, req, "", fi.ModTime(), f)
}

func (h *handler) fail(w http.ResponseWriter, err error) {
	var bt *BadTarballError
	switch {
	case errors.Is(err, ErrNotFound):
		writeStatus(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrNoServerHasBlob):
		h.log.Warn("image blob unavailable", "err", err)
		writeStatus(w, http.StatusServiceUnavailable, err.Error())
	case errors.As(err, &bt), strings.Contains(err.Error(), "not a sha256 digest"), strings.HasPrefix(err.Error(), "image name"):
		writeStatus(w, http.StatusBadRequest, err.Error())
	default:
		h.log.Error("image store", "err", err)
		writeStatus(w, http.StatusInternalServerError, err.Error())
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// writeStatus answers with a Kubernetes Status, so clients show the
// message as they show any API error.
func writeStatus(w http.ResponseWriter, code int, msg string) {
	reason := map[int]string{400: "BadRequest", 404: "NotFound", 500: "InternalError", 503: "ServiceUnavailable"}[code]
	writeJSON(w, code, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"message": msg, "reason": reason, "code": code})
}
