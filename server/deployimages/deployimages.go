// Package deployimages reads the images an operator publishes for tenants
// to deploy from the portal (serve --deploy-images FILE), and turns an
// image and its checksum into the instance_info an agent deploy needs.
package deployimages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/anvilproject/anvil/server/errs"
)

// Image is one published image: what the pick-list calls it, where the
// agent downloads it and the checksum it verifies.
type Image struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	Checksum string `json:"checksum"`
	// SSHUser is the account the image's cloud-init gives the config
	// drive's keys (debian, ubuntu, cloud-user, root…), for the SSH
	// command the portal shows; empty when the operator did not say.
	SSHUser string `json:"ssh_user,omitempty"`
}

// sshUserRE is a portable login name, as useradd takes it.
var sshUserRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// Load reads a JSON list of images; any fault is an error naming the
// file and the entry, since the server refuses to start with it.
func Load(path string) ([]Image, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var out []Image
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("%s: not a JSON list of {name, url, checksum, ssh_user}: %w", path, err)
	}
	seen := map[string]bool{}
	for i, im := range out {
		switch {
		case strings.TrimSpace(im.Name) == "" || len(im.Name) > 100:
			return nil, fmt.Errorf("%s: image %d: name must be 1 to 100 characters", path, i+1)
		case seen[im.Name]:
			return nil, fmt.Errorf("%s: image %d: name %q is listed twice", path, i+1, im.Name)
		case im.SSHUser != "" && !sshUserRE.MatchString(im.SSHUser):
			return nil, fmt.Errorf("%s: image %q: ssh_user must be a login name: a lower-case letter or _, then up to 31 of those, digits and -", path, im.Name)
		}
		seen[im.Name] = true
		if err := CheckURL("url", im.URL); err != nil {
			return nil, fmt.Errorf("%s: image %q: %w", path, im.Name, err)
		}
		if _, err := InstanceInfo(im.URL, im.Checksum, "checksum"); err != nil {
			return nil, fmt.Errorf("%s: image %q: %w", path, im.Name, err)
		}
	}
	return out, nil
}

// CheckURL accepts the http(s) URL an agent downloads an image from, as
// the conductor's deploy does (at most 2048 characters).
func CheckURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(raw) > 2048 || strings.ContainsAny(raw, " \t\r\n") {
		return errs.BadRequest(field, "%s must be an http:// or https:// URL of a whole-disk image (at most 2048 characters)", field)
	}
	return nil
}

// hashAlgos are the algorithms the agent verifies an image with.
var hashAlgos = []string{"md5", "sha1", "sha256", "sha384", "sha512"}

// hexLen is each algorithm's digest length in hex digits.
var hexLen = map[string]int{"md5": 32, "sha1": 40, "sha256": 64, "sha384": 96, "sha512": 128}

var hexRE = regexp.MustCompile(`^[0-9a-f]+$`)

// InstanceInfo is the instance_info that deploys the image at src: its
// checksum as "algo:hex" becomes image_os_hash_algo and _value, as
// Glance gives them; bare hex is image_checksum. field names the
// checksum in a refusal.
func InstanceInfo(src, checksum, field string) (map[string]any, error) {
	sum := strings.ToLower(strings.TrimSpace(checksum))
	algo, val, ok := strings.Cut(sum, ":")
	if !ok {
		algo, val = "", sum
	}
	bad := func() error {
		return errs.BadRequest(field, "%s must be the image's checksum: sha256:<hex> (or md5, sha1, sha384, sha512), or its hex digest alone", field)
	}
	switch {
	case !hexRE.MatchString(val):
		return nil, bad()
	case algo == "":
		if !slices.Contains([]int{32, 40, 64, 96, 128}, len(val)) {
			return nil, bad()
		}
		return map[string]any{"image_source": src, "image_checksum": val}, nil
	case !slices.Contains(hashAlgos, algo) || len(val) != hexLen[algo]:
		return nil, bad()
	}
	return map[string]any{"image_source": src, "image_os_hash_algo": algo, "image_os_hash_value": val}, nil
}
