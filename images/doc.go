// Package images keeps container images on the everynode servers, for nodes
// that reach no registry (docs/edge.md §4).
//
// A Store holds images as content-addressed blobs on disk (its directory's
// blobs/sha256/<hex>, never in etcd) and one small JSON record per image
// name. Load reads a `docker save` tarball — Docker's manifest.json layout
// or the OCI image layout Docker 25 and later write, multi-platform indexes
// included — verifying every digest it can. Handler serves the store over
// HTTP under /everynode/v1/ (blobs with Range requests, so transfers
// resume), and Fetcher is the agent's side: it downloads the blobs of its
// own platform, verifies them, and streams a tarball the engine can load.
package images
