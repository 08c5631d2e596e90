package bootiso

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// RoutePrefix is where BMCs download built ISOs, without credentials: a
// BMC's virtual media takes a plain URL. Each ISO's name is 32 random
// bytes, so only the BMC it was handed to can find it, and it lives only
// for one boot of the agent.
const RoutePrefix = "/boot-iso/"

// Store keeps the built ISOs as files in Dir.
type Store struct {
	Dir string
	// BaseURL is Anvil's address as BMCs reach it (scheme, host, port,
	// any path prefix of a proxy), without a trailing slash.
	BaseURL string
}

var validName = regexp.MustCompile(`^[0-9a-f]{64}\.iso$`)

// Create builds an ISO through build under a fresh random name and
// returns the name and the URL a BMC downloads it from. The ISO is
// written under a hidden name and renamed into place once complete, so
// the URL never serves half an image; a failed build leaves nothing.
func (s *Store) Create(build func(f *os.File) error) (name, url string, err error) {
	if err := os.MkdirAll(s.Dir, 0o750); err != nil {
		return "", "", fmt.Errorf("boot ISO directory: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	name = hex.EncodeToString(b[:]) + ".iso"
	f, err := os.CreateTemp(s.Dir, ".building-*")
	if err != nil {
		return "", "", fmt.Errorf("boot ISO directory: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	err = build(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Readable by a web server in front of Anvil, as Ironic's
		// [redfish]file_permission.
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.Dir, name))
	}
	if err != nil {
		return "", "", err
	}
	return name, s.URL(name), nil
}

// URL is where a BMC downloads the ISO called name.
func (s *Store) URL(name string) string {
	return strings.TrimRight(s.BaseURL, "/") + RoutePrefix + name
}

// Open opens the ISO called name for reading; a name that is not one
// Create gives, or an ISO already removed, is fs.ErrNotExist.
func (s *Store) Open(name string) (*os.File, os.FileInfo, error) {
	if !validName.MatchString(name) {
		return nil, nil, fs.ErrNotExist
	}
	f, err := os.Open(filepath.Join(s.Dir, name))
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// Remove deletes the ISO called name; one already gone is no error. A
// download under way keeps reading its open file until it ends.
func (s *Store) Remove(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("boot ISO name %q is not one Anvil gives", name)
	}
	err := os.Remove(filepath.Join(s.Dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
