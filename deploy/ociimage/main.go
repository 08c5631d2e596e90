// Command ociimage writes Anvil's container image as an OCI image layout
// in one tar archive (what `podman load`, `skopeo copy oci-archive:…` and
// registries' import tools take), with no base image, no registry pull and
// no container runtime. Three layers: a minimal root (passwd and group
// naming the non-root anvil user, CA certificates, the state and temporary
// directories); ipmitool and the libraries it links, unpacked from
// Debian's packages for the image's architecture (-debs, which
// deploy/ociimage/debs.sh fills), so the conductor drives IPMI BMCs as the
// .deb's does; then the static binary and the third-party notices.
//
//	go run ./deploy/ociimage -binary dist/anvil-v1.0.0-linux-amd64 -debs DIR -notices dist/THIRD_PARTY_NOTICES \
//	  -version v1.0.0 -commit … -arch amd64 -out dist/anvil-v1.0.0-linux-amd64.oci.tar
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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
		debs    = flag.String("debs", "", "directory of Debian packages (.deb) for -arch to unpack into the image: ipmitool and its libraries (deploy/ociimage/debs.sh); empty for none")
		notices = flag.String("notices", "", "THIRD_PARTY_NOTICES to ship as /usr/share/doc/anvil/THIRD_PARTY_NOTICES (deploy/notices)")
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
	if err := build(*binary, *cas, *debs, *notices, *version, *commit, *arch, created, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// entry is one file, directory or link of a layer.
type entry struct {
	name     string
	mode     int64
	uid      int
	gid      int // when not 0; else uid's
	dir      bool
	contents []byte
	// link is a symbolic link's target, or with hard a hard link's
	// (another entry's name).
	link string
	hard bool
}

func build(binary, cas, debs, notices, version, commit, arch string, created time.Time, out string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	if err := checkELF(bin, arch); err != nil {
		return fmt.Errorf("%s: %w", binary, err)
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
	if notices != "" {
		text, err := os.ReadFile(notices)
		if err != nil {
			return err
		}
		app = append(app,
			entry{name: "usr/share/", mode: 0o755, dir: true},
			entry{name: "usr/share/doc/", mode: 0o755, dir: true},
			entry{name: "usr/share/doc/anvil/", mode: 0o755, dir: true},
			entry{name: "usr/share/doc/anvil/THIRD_PARTY_NOTICES", mode: 0o644, contents: text})
	}
	layersOf := [][]entry{root}
	history := []string{"anvil deploy/ociimage: root (passwd, CA certificates, state dir)"}
	if debs != "" {
		pkgs, names, err := debLayer(debs, arch)
		if err != nil {
			return err
		}
		layersOf = append(layersOf, pkgs)
		history = append(history, "anvil deploy/ociimage: Debian packages "+strings.Join(names, " "))
	}
	layersOf = append(layersOf, app)
	history = append(history, "anvil deploy/ociimage: /usr/bin/anvil "+version)
	var blobs []blob
	var layers []descriptor
	var diffIDs []string
	for _, l := range layersOf {
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
		"rootfs":  map[string]any{"type": "layers", "diff_ids": diffIDs},
		"history": historyOf(history, created),
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
		"annotations":   map[string]string{"org.opencontainers.image.created": created.Format(time.RFC3339), "org.opencontainers.image.version": version},
	})
	if err != nil {
		return err
	}
	man := newBlob("application/vnd.oci.image.manifest.v1+json", manifest)
	mdesc := man.desc
	// The ref name is the tag `skopeo copy oci-archive:FILE:TAG` and
	// `podman load` find the image by.
	mdesc.Annotations = map[string]string{"org.opencontainers.image.ref.name": version}
	mdesc.Platform = &platform{Architecture: arch, OS: "linux"}
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
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

func historyOf(steps []string, created time.Time) []map[string]any {
	var out []map[string]any
	for _, s := range steps {
		out = append(out, map[string]any{"created": created.Format(time.RFC3339), "created_by": s})
	}
	return out
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
		gid := e.uid
		if e.gid != 0 {
			gid = e.gid
		}
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: gid, ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case e.dir:
			h.Typeflag = tar.TypeDir
		case e.hard:
			h.Typeflag, h.Linkname = tar.TypeLink, e.link
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		default:
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

// elfMachine is each GOARCH's ELF machine, to check that a binary or a
// package's program is the image's architecture.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func checkELF(b []byte, arch string) error {
	want, ok := elfMachine[arch]
	if !ok {
		return fmt.Errorf("architecture %q: want amd64 or arm64", arch)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if f.Machine != want {
		return fmt.Errorf("an ELF file for %v, not %s", f.Machine, arch)
	}
	return nil
}

// debLayer unpacks every .deb in dir (dpkg-deb --fsys-tarfile) into one
// layer, and names the packages as name=version. Each package must be for
// arch (Debian's names for amd64 and arm64 are Go's) or all. Manual pages,
// info files, lintian overrides and documentation other than each
// package's copyright are left out: a container has no reader for them,
// and the copyright files are what Debian's licences ask to be kept.
func debLayer(dir, arch string) ([]entry, []string, error) {
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil {
		return nil, nil, err
	}
	if len(debs) == 0 {
		return nil, nil, fmt.Errorf("no .deb in %s", dir)
	}
	var out []entry
	var names []string
	seen := map[string]bool{}
	for _, deb := range debs {
		fields, err := exec.Command("dpkg-deb", "--showformat=${Package}=${Version} ${Architecture}", "--show", deb).Output()
		if err != nil {
			return nil, nil, fmt.Errorf("dpkg-deb --show %s: %w", deb, err)
		}
		name, debArch, _ := strings.Cut(strings.TrimSpace(string(fields)), " ")
		if debArch != arch && debArch != "all" {
			return nil, nil, fmt.Errorf("%s is for %s, not %s", deb, debArch, arch)
		}
		names = append(names, name)
		cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		data, err := cmd.Output()
		if err != nil {
			return nil, nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %v: %s", deb, err, stderr.Bytes())
		}
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", deb, err)
			}
			name := strings.TrimPrefix(path.Clean(h.Name), "./")
			if name == "." || name == "" || leaveOut(name) {
				continue
			}
			e := entry{name: name, mode: h.Mode & 0o7777}
			switch h.Typeflag {
			case tar.TypeDir:
				e.dir, e.name = true, name+"/"
			case tar.TypeSymlink:
				e.link = h.Linkname
			case tar.TypeLink:
				e.link, e.hard = strings.TrimPrefix(path.Clean(h.Linkname), "./"), true
			case tar.TypeReg:
				if e.contents, err = io.ReadAll(tr); err != nil {
					return nil, nil, err
				}
			default:
				return nil, nil, fmt.Errorf("%s: %s has type %c", deb, h.Name, h.Typeflag)
			}
			// Ownership as the package has it (freeipmi.conf is root:adm).
			e.uid, e.gid = h.Uid, h.Gid
			if seen[e.name] {
				if e.dir {
					continue // directories packages share
				}
				return nil, nil, fmt.Errorf("%s: %s is in another package too", deb, name)
			}
			seen[e.name] = true
			out = append(out, e)
		}
	}
	return out, names, nil
}

func leaveOut(name string) bool {
	for _, p := range []string{"usr/share/man/", "usr/share/info/", "usr/share/lintian/"} {
		if strings.HasPrefix(name+"/", p) {
			return true
		}
	}
	// usr/share/doc/<package>/<file>: only copyright stays.
	if rest, ok := strings.CutPrefix(name, "usr/share/doc/"); ok {
		if _, file, deeper := strings.Cut(rest, "/"); deeper && file != "copyright" {
			return true
		}
	}
	return false
}
