package reference

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPathFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvVar, dir)
	if got, want := Path("ipa", "start.sh"), filepath.Join(dir, "ipa", "start.sh"); got != want {
		t.Errorf("Path with %s=%s: %q, want %q", EnvVar, dir, got, want)
	}
	// A relative setting is the checkout's, whatever package directory
	// the test runs in, and is made absolute: tests hand the path to
	// programs that run elsewhere.
	t.Setenv(EnvVar, "rel")
	if got, want := Path("x"), filepath.Join(Root(), "rel", "x"); got != want || !filepath.IsAbs(got) {
		t.Errorf("relative setting: %q, want %q", got, want)
	}
}

func TestPathBesideTheCheckout(t *testing.T) {
	t.Setenv(EnvVar, "")
	root := Root()
	if root == "" {
		t.Fatal("no go.mod above the package directory")
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("Root %q: %v", root, err)
	}
	if got, want := Path("redfish-sim"), filepath.Join(filepath.Dir(root), "shared", "reference", "redfish-sim"); got != want {
		t.Errorf("Path: %q, want %q", got, want)
	}
}
