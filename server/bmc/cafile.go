package bmc

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// A value that names a file on the conductor host is the operator's to
// give: driver_info is writable by owner-project members, and a path
// they chose would let them make the conductor read /dev/zero until it
// runs out of memory, or learn which files exist. So a path is accepted
// only from system scope, only under the directory the operator
// configured (--bmc-ca-dir), only when it is a regular file, and only
// MaxCAFileBytes of it are read; everyone may give the PEM bundle itself.

// MaxCAFileBytes bounds a CA bundle file read from the CA directory.
const MaxCAFileBytes = 1 << 20

// MaxInlineCABytes bounds a PEM bundle given inline in driver_info: it is
// stored with the node and shown to its readers, so it stays far below
// a file's cap (enough for dozens of certificates).
const MaxInlineCABytes = 64 << 10

const pemCertificate = "-----BEGIN CERTIFICATE-----"

var (
	caMu  sync.RWMutex
	caDir string
)

// SetCADir sets the directory CA bundle paths must lie under; "" accepts
// no path at all. It is process-wide, as the BMC networks are, because
// node writes (nodes) and every connection (conductor) must agree on it.
func SetCADir(dir string) {
	caMu.Lock()
	defer caMu.Unlock()
	caDir = dir
}

// CheckCADir checks, at start-up, that dir is a directory the
// conductor can use for CA bundles; "" (none) is valid.
func CheckCADir(dir string) error {
	if dir == "" {
		return nil
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%q is not an absolute path", dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

func configuredCADir() string {
	caMu.RLock()
	defer caMu.RUnlock()
	return caDir
}

// isInlinePEM tells an inline bundle from a path: no path Anvil accepts
// holds a PEM armour line.
func isInlinePEM(s string) bool { return strings.Contains(s, pemCertificate) }

// isCAPath reports whether a redfish_verify_ca value names a file: it is
// neither a boolean nor an inline bundle.
func isCAPath(v any) bool {
	s, ok := v.(string)
	return ok && !strings.EqualFold(s, "true") && !strings.EqualFold(s, "false") && !isInlinePEM(s)
}

// parseCAs parses a PEM bundle, which must hold at least one certificate
// and no certificate block that fails to parse.
func parseCAs(b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %v", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}

// readCAFile reads a CA bundle file under the configured directory. Its
// errors say why, for the operator; callers below system scope get one
// fixed sentence instead (caPathRefused), which says nothing about the
// file. It never blocks on a FIFO or device and never reads more than
// MaxCAFileBytes+1 bytes.
func readCAFile(path string) ([]byte, error) {
	dir := configuredCADir()
	if dir == "" {
		return nil, errors.New("no CA directory is configured (--bmc-ca-dir), so no path is accepted")
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("the CA directory: %v", err)
	}
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%q is not an absolute path", path)
	}
	// Resolving every link first means the checks below see the file
	// itself: a link inside the directory to /dev/zero is /dev/zero.
	real, err := filepath.EvalSymlinks(filepath.Clean(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if rel, err := filepath.Rel(root, real); err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("%s is not under the CA directory %s", path, dir)
	}
	if fi, err := os.Lstat(real); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	// O_NONBLOCK: should the file have become a FIFO since the check,
	// opening it must not wait for a writer; O_NOFOLLOW: nor a link.
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > MaxCAFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxCAFileBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxCAFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(b) > MaxCAFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxCAFileBytes)
	}
	return b, nil
}

// loadCAFile reads and parses a CA bundle file, naming the problem.
func loadCAFile(path string) (*x509.CertPool, error) {
	b, err := readCAFile(path)
	if err != nil {
		return nil, err
	}
	pool, err := parseCAs(b)
	if err != nil {
		return nil, fmt.Errorf("%s %v", path, err)
	}
	return pool, nil
}

// caPathRefused is the one answer about a CA path a caller below system
// scope, or a connection, gets: the same whether the file exists, is too
// large, is a device or lies elsewhere.
func caPathRefused(key string) *FieldError {
	return fieldErr(key, "driver_info/%s names a file this conductor does not read: a CA bundle path must be set by a system-scope caller and lie under the operator's CA directory; give true, false or the PEM bundle itself", key)
}

// CheckPaths applies the rules on file paths to a node's driver_info as
// a caller writes it: before is what is stored (nil for a new node). A
// path the caller did not change passes (it is checked again at every
// connection); a new one is refused below system scope without looking
// at it, and read and parsed for a system-scope caller, who is told why
// it does not do.
func CheckPaths(driver string, info, before map[string]any, system bool) error {
	for _, k := range drivers[Canonical(driver)] {
		if k.kind != kBoolOrPath {
			continue
		}
		v := info[k.name]
		if !isCAPath(v) || before != nil && before[k.name] == v {
			continue
		}
		if !system {
			return caPathRefused(k.name)
		}
		if _, err := loadCAFile(v.(string)); err != nil {
			return fieldErr(k.name, "driver_info/%s: %v", k.name, err)
		}
	}
	return nil
}
