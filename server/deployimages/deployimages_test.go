package deployimages_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/deployimages"
	"github.com/anvilproject/anvil/server/errs"
)

// TestInstanceInfo: "algo:hex" becomes Glance's os_hash pair, bare hex
// image_checksum; anything else is a 400 naming the field.
func TestInstanceInfo(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	md5 := strings.Repeat("c", 32)
	for sum, want := range map[string]map[string]any{
		"sha256:" + sha:                      {"image_source": "u", "image_os_hash_algo": "sha256", "image_os_hash_value": sha},
		"SHA256:" + strings.ToUpper(sha):     {"image_source": "u", "image_os_hash_algo": "sha256", "image_os_hash_value": sha},
		"sha512:" + strings.Repeat("0", 128): {"image_source": "u", "image_os_hash_algo": "sha512", "image_os_hash_value": strings.Repeat("0", 128)},
		md5:                                  {"image_source": "u", "image_checksum": md5},
	} {
		got, err := deployimages.InstanceInfo("u", sum, "image_checksum")
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v %v", sum, got, err)
		}
	}
	for _, sum := range []string{"", "sha256:", "sha256:" + sha[:10], "crc32:" + sha, "sha256:" + strings.Repeat("g", 64), strings.Repeat("a", 33)} {
		if _, err := deployimages.InstanceInfo("u", sum, "image_checksum"); errs.Status(err) != 400 || !strings.Contains(err.Error(), "image_checksum") {
			t.Errorf("%q: %v, want a 400 naming image_checksum", sum, err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		t.Helper()
		p := filepath.Join(dir, "images.json")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sha := strings.Repeat("1", 64)
	p := write(`[{"name": "Debian 13", "url": "https://images.example/debian.raw", "checksum": "sha256:` + sha + `", "ssh_user": "debian"}]`)
	got, err := deployimages.Load(p)
	if err != nil || len(got) != 1 || got[0].Name != "Debian 13" || got[0].SSHUser != "debian" {
		t.Fatalf("Load: %v %v", got, err)
	}
	for body, want := range map[string]string{
		`[{"name": "a", "url": "ftp://x/a", "checksum": "sha256:` + sha + `"}]`:                                                                 `image "a": url must be`,
		`[{"name": "a", "url": "http://x/a", "checksum": "sha256:` + sha + `"}, {"name": "a", "url": "http://x/a", "checksum": "` + sha + `"}]`: `image 2: name "a" is listed twice`,
		`[{"name": "", "url": "http://x/a", "checksum": "` + sha + `"}]`:                                                                        "image 1: name must be",
		`[{"name": "a", "url": "http://x/a", "sum": "` + sha + `"}]`:                                                                            "not a JSON list",
		`[{"name": "a", "url": "http://x/a", "checksum": "` + sha + `", "ssh_user": "Root; rm"}]`:                                               `image "a": ssh_user must be a login name`,
	} {
		if _, err := deployimages.Load(write(body)); err == nil || !strings.Contains(err.Error(), p+": "+want) {
			t.Errorf("%s: %v, want %q naming the file", body, err, want)
		}
	}
}
