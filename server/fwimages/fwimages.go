// Package fwimages keeps the firmware images operators upload, for
// firmware.update steps to name: each is a file on disk under its SHA-256,
// which the BMC downloads from Anvil's public /firmware/{sha256}/{name}
// route. The content hash makes the address immutable and unguessable,
// so BMCs fetch without credentials.
package fwimages

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
)

// The rules guarding the images; Anvil's own, system-scoped.
const (
	RuleList   = "anvil:firmware_image:list"
	RuleCreate = "anvil:firmware_image:create"
	RuleDelete = "anvil:firmware_image:delete"
)

// DefaultMaxBytes is the largest image accepted unless configured: BIOS
// and BMC images are tens of MiB; bundles reach a few hundred.
const DefaultMaxBytes = 1 << 30

// RoutePrefix is where the public download route lives.
const RoutePrefix = "/firmware/"

// incoming holds uploads until they are complete; it is inside Dir so the
// final rename stays on one file system and is atomic.
const incoming = ".incoming"

// Store keeps images under Dir as SHA256/NAME.
type Store struct {
	Dir string
	// BaseURL is Anvil's address as BMCs reach it (scheme, host, port,
	// any path prefix of a proxy), without a trailing slash.
	BaseURL  string
	MaxBytes int64
	Guard    *guard.Guard
}

// Image is one stored image.
type Image struct {
	Name      string    `json:"name"`
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256"`
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
}

var (
	validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)
	validHash = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidateName checks an image's name: it becomes the last segment of a
// URL a BMC fetches, so it keeps to characters no BMC mangles.
func ValidateName(name string) error {
	if !validName.MatchString(name) {
		return errs.BadRequest("name", "name %q must be 1 to 128 letters, digits, '.', '_', '+' or '-', starting with a letter or digit", name)
	}
	return nil
}

// Add stores an image for a caller allowed to upload. open is called
// only once the caller is authorized, so nothing of a refused upload is
// read; it yields the image's name and its bytes. The upload is audited,
// whatever its outcome.
func (s *Store) Add(ctx context.Context, open func() (name string, r io.Reader, err error)) (img Image, err error) {
	if err := s.Guard.Authorize(ctx, RuleCreate, "firmware image", "", policies.Target{}); err != nil {
		return Image{}, err
	}
	var name string
	defer func() {
		s.Guard.Done(ctx, RuleCreate, "firmware image", img.SHA256, err, map[string]any{"name": name, "size": img.Size})
	}()
	name, r, err := open()
	if err != nil {
		return Image{}, err
	}
	return s.Put(name, r)
}

// Put stores the image without authorizing or auditing, for callers that
// act as the system itself (the demo's start-up). The bytes are hashed as
// they are written to a temporary file, which is synced and then renamed
// into place, so a reader never sees half an image and the same content
// under the same name is one file.
func (s *Store) Put(name string, r io.Reader) (Image, error) {
	if err := ValidateName(name); err != nil {
		return Image{}, err
	}
	tmpDir := filepath.Join(s.Dir, incoming)
	if err := os.MkdirAll(tmpDir, 0o750); err != nil {
		return Image{}, fmt.Errorf("firmware image directory: %w", err)
	}
	f, err := os.CreateTemp(tmpDir, "upload-*")
	if err != nil {
		return Image{}, fmt.Errorf("firmware image directory: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, s.MaxBytes+1))
	if err == nil && n > s.MaxBytes {
		err = &errs.Error{Status: 413, Field: "body", Msg: fmt.Sprintf("the image is larger than %d bytes, the most this server accepts (--firmware-max-mib)", s.MaxBytes)}
	}
	if err == nil && n == 0 {
		err = errs.BadRequest("body", "the image is empty")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Image{}, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	dir := filepath.Join(s.Dir, sum)
	if err := os.Chmod(tmp, 0o640); err != nil {
		return Image{}, err
	}
	// A Delete of the same hash (by another replica sharing the
	// directory, or another request) may remove the directory between
	// MkdirAll and Rename: make it again once.
	for try := 0; ; try++ {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return Image{}, err
		}
		err := os.Rename(tmp, filepath.Join(dir, name))
		if err == nil {
			break
		}
		if try > 0 || !errors.Is(err, fs.ErrNotExist) {
			return Image{}, err
		}
	}
	return s.image(sum, name)
}

func (s *Store) image(sum, name string) (Image, error) {
	fi, err := os.Stat(filepath.Join(s.Dir, sum, name))
	if err != nil {
		return Image{}, err
	}
	return Image{Name: name, Size: fi.Size(), SHA256: sum, URL: s.URL(sum, name), CreatedAt: fi.ModTime().UTC()}, nil
}

// URL is where a BMC downloads the image.
func (s *Store) URL(sum, name string) string {
	return strings.TrimRight(s.BaseURL, "/") + RoutePrefix + sum + "/" + name
}

// List returns every image, by name, for a caller allowed to see them.
func (s *Store) List(ctx context.Context) ([]Image, error) {
	if err := s.Guard.Authorize(ctx, RuleList, "firmware image", "", policies.Target{}); err != nil {
		return nil, err
	}
	sums, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []Image{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []Image{}
	for _, d := range sums {
		if !d.IsDir() || !validHash.MatchString(d.Name()) {
			continue
		}
		files, err := os.ReadDir(filepath.Join(s.Dir, d.Name()))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if !f.Type().IsRegular() || ValidateName(f.Name()) != nil {
				continue
			}
			img, err := s.image(d.Name(), f.Name())
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted while listing
			}
			if err != nil {
				return nil, err
			}
			out = append(out, img)
		}
	}
	slices.SortFunc(out, func(a, b Image) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.SHA256, b.SHA256)
	})
	return out, nil
}

// Delete removes every name stored under the hash sum. Runbooks naming
// its URL fail their firmware step afterwards, with the BMC's words.
func (s *Store) Delete(ctx context.Context, sum string) (err error) {
	if err := s.Guard.Authorize(ctx, RuleDelete, "firmware image", sum, policies.Target{}); err != nil {
		return err
	}
	var names []string
	defer func() { s.Guard.Done(ctx, RuleDelete, "firmware image", sum, err, map[string]any{"names": names}) }()
	if !validHash.MatchString(sum) {
		return errs.BadRequest("sha256", "sha256 %q must be 64 lower-case hexadecimal digits", sum)
	}
	dir := filepath.Join(s.Dir, sum)
	files, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return errs.NotFound("Firmware image %s could not be found.", sum)
	}
	if err != nil {
		return err
	}
	for _, f := range files {
		names = append(names, f.Name())
	}
	return os.RemoveAll(dir)
}

// Open opens an image for download. Anyone may: the hash is the secret.
// A malformed hash or name is simply not found.
func (s *Store) Open(sum, name string) (*os.File, fs.FileInfo, error) {
	if !validHash.MatchString(sum) || ValidateName(name) != nil {
		return nil, nil, errs.NotFound("There is no firmware image at %s%s/%s.", RoutePrefix, sum, name)
	}
	f, err := os.Open(filepath.Join(s.Dir, sum, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, errs.NotFound("There is no firmware image at %s%s/%s.", RoutePrefix, sum, name)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, errs.NotFound("There is no firmware image at %s%s/%s.", RoutePrefix, sum, name)
	}
	return f, fi, nil
}

// Local finds the stored image a URL of this Anvil names, for BMCs that
// cannot pull and to which Anvil pushes the image itself. Only this
// store's own download URL counts: another host, another path, a query
// or a hash not stored is refused with the reason, and nothing named by
// the URL is ever opened or fetched except the store's own file.
func (s *Store) Local(raw string) (string, error) {
	prefix := strings.TrimRight(s.BaseURL, "/") + RoutePrefix
	rest, ok := strings.CutPrefix(raw, prefix)
	if !ok || s.BaseURL == "" {
		return "", fmt.Errorf("is not a firmware image of this Anvil (%s<sha256>/<name>); upload the image to Anvil's firmware image store and name the URL it gives", prefix)
	}
	sum, name, ok := strings.Cut(rest, "/")
	if !ok || !validHash.MatchString(sum) || ValidateName(name) != nil {
		return "", fmt.Errorf("is not a firmware image URL of this Anvil: it must be %s<sha256>/<name>", prefix)
	}
	path := filepath.Join(s.Dir, sum, name)
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("names firmware image %s/%s, which this Anvil does not have (deleted, or never uploaded)", sum, name)
	}
	return path, nil
}
