// Command ociimage writes Anvil's container image as an OCI image layout
// in one tar archive (what `podman load`, `skopeo copy oci-archive:…` and
// registries' import tools take), from the static binary alone: no base
// image, no registry pull, no container runtime. Two layers: a minimal
// root (passwd and group naming the non-root anvil user, CA
// certificates, the state and temporary directories), then the binary.
//
// The image has no ipmitool, so its conductor drives Redfish BMCs only;
// IPMI nodes need the .deb (which depends on ipmitool).
//
//	go run ./deploy/ociimage -binary dist/anvil -version v1.0.0 -commit … -out dist/anvil-v1.0.0.oci.tar
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

// The image's user: 65532 is the "nonroot" id distroless images use, so
// volume permissions carry over from those conventions.
const (
	uid      = 65532
	stateDir = "var/lib/anvil"
)

func main() {
	var (
		binary  = flag.String("binary", "dist/anvil", "static anvil binary (CGO_ENABLED=0)")
		cas     = flag.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle the image trusts (OIDC issuers, HTTPS image URLs, Redfish BMCs)")
		version = flag.String("version", "dev", "image version: its ref name and org.opencontainers.image.version")
		commit  = flag.String("commit", "", "VCS revision label")
		date    = flag.String("date", "", "creation time, RFC 3339; also every file's mtime, so one commit builds the same bytes (default: now)")
		arch    = flag.String("arch", runtime.GOARCH, "the binary's GOARCH")
		out     = flag.String("out", "", "archive to write")
	)
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "ociimage: -out is required")
		os.Exit(2)
	}
	created := time.Now().UTC()
	if *date != "" {
		var err error
		if created, err = time.Parse(time.RFC3339, *date); err != nil {
			fmt.Fprintln(os.Stderr, "ociimage: -date:", err)
			os.Exit(2)
		}
	}
	if err := build(*binary, *cas, *version, *commit, *arch, created, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// entry is one file or directory of a layer.
type entry struct {
	name     string
	mode     int64
	uid      int
	dir      bool
	contents []byte
}

func build(binary, cas, version, commit, arch string, created time.Time, out string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	certs, err := os.ReadFile(cas)
	if err != nil {
		return fmt.Errorf("CA certificates: %w", err)
	}
	root := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, contents: []byte("root:x:0:0:root:/root:/sbin/nologin\nanvil:x:" + strconv.Itoa(uid) + ":" + strconv.Itoa(uid) + ":Anvil:/" + stateDir + ":/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, contents: []byte("root:x:0:\nanvil:x:" + strconv.Itoa(uid) + ":\n")},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, contents: certs},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "var/", mode: 0o755, dir: true},
		{name: "var/lib/", mode: 0o755, dir: true},
		// Owned by the user so a fresh volume mounted here is writable.
		{name: stateDir + "/", mode: 0o700, uid: uid, dir: true},
	}
	app := []entry{
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/bin/", mode: 0o755, dir: true},
		{name: "usr/bin/anvil", mode: 0o755, contents: bin},
	}
	var blobs []blob
	var layers []descriptor
	var diffIDs []string
	for _, l := range [][]entry{root, app} {
		gz, diffID, err := layer(l, created)
		if err != nil {
			return err
		}
		b := newBlob("application/vnd.oci.image.layer.v1.tar+gzip", gz)
		blobs = append(blobs, b)
		layers = append(layers, b.desc)
		diffIDs = append(diffIDs, diffID)
	}
	labels := map[string]string{
		"org.opencontainers.image.title":    "anvil",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": commit,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
	}
	config, err := json.Marshal(map[string]any{
		"created":      created.Format(time.RFC3339),
		"architecture": arch,
		"os":           "linux",
		"config": map[string]any{
			"User": strconv.Itoa(uid) + ":" + strconv.Itoa(uid),
			// serve is the default command, not part of the entrypoint,
			// so `podman run IMAGE user create …` runs that command.
			"Entrypoint": []string{"/usr/bin/anvil"},
			"Cmd":        []string{"serve"},
			// Every setting is an ANVIL_* variable or a flag after the
			// entrypoint; these make the defaults fit a container: listen
			// beyond loopback, keep SQLite and its files in the volume.
			"Env": []string{
				"PATH=/usr/bin",
				"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
				"ANVIL_LISTEN=:6385",
				"ANVIL_DATABASE=/" + stateDir + "/anvil.db",
				"ANVIL_POLICY_DIR=/" + stateDir + "/policy.d",
			},
			"WorkingDir":   "/" + stateDir,
			"ExposedPorts": map[string]any{"6385/tcp": map[string]any{}},
			"Volumes":      map[string]any{"/" + stateDir: map[string]any{}},
			"Labels":       labels,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
		"history": []map[string]any{
			{"created": created.Format(time.RFC3339), "created_by": "anvil deploy/ociimage: root (passwd, CA certificates, state dir)"},
			{"created": created.Format(time.RFC3339), "created_by": "anvil deploy/ociimage: /usr/bin/anvil " + version},
		},
	})
	if err != nil {
		return err
	}
	cfg := newBlob("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        cfg.desc,
		"layers":        layers,
		"annotations":   map[string]string{"org.opencontainers.image.created": created.Format(time.RFC3339)},
	})
	if err != nil {
		return err
	}
	man := newBlob("application/vnd.oci.image.manifest.v1+json", manifest)
	mdesc := man.desc
	// The ref name is the tag `skopeo copy oci-archive:FILE:TAG` and
	// `podman load` find the image by.
	mdesc.Annotations = map[string]string{"org.opencontainers.image.ref.name": version}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{mdesc},
	})
	if err != nil {
		return err
	}
	files := []entry{
		{name: "oci-layout", mode: 0o644, contents: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: "index.json", mode: 0o644, contents: index},
		{name: "blobs/", mode: 0o755, dir: true},
		{name: "blobs/sha256/", mode: 0o755, dir: true},
	}
	for _, b := range append(blobs, cfg, man) {
		files = append(files, entry{name: "blobs/sha256/" + b.hex, mode: 0o644, contents: b.data})
	}
	var archive bytes.Buffer
	if err := writeTar(&archive, files, created); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, archive.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type blob struct {
	desc descriptor
	hex  string
	data []byte
}

func newBlob(mediaType string, data []byte) blob {
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	return blob{desc: descriptor{MediaType: mediaType, Digest: "sha256:" + h, Size: int64(len(data))}, hex: h, data: data}
}

// layer returns the gzipped tar of entries and the sha256 of the
// uncompressed tar (the config's diff_id).
func layer(entries []entry, mtime time.Time) ([]byte, string, error) {
	var raw bytes.Buffer
	if err := writeTar(&raw, entries, mtime); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw.Bytes())
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, "", err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return gz.Bytes(), "sha256:" + hex.EncodeToString(sum[:]), nil
}

func writeTar(w *bytes.Buffer, entries []entry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: mtime, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.contents))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.contents); err != nil {
			return err
		}
	}
	return tw.Close()
}
