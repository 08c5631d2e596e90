// Package reference finds the reference copies the tests run (the Redfish
// simulator, the IPMI simulator's configuration, the real agent), which
// are not part of the repository: the project never copies upstream code
// (sushy-tools, ironic-python-agent) into its tree.
//
// ANVIL_REFERENCE_DIR names the folder when it is set; otherwise it is
// ../shared/reference beside the checkout, where the project's machines
// keep it. A clone anywhere else sets the variable (CONTRIBUTING.md).
//
// The fallback starts from the working directory, where go test runs each
// package, rather than from the source file's path: the suite builds with
// -trimpath (so a fresh clone reuses the build cache), which leaves no
// absolute path in the binary.
package reference

import (
	"os"
	"path/filepath"
)

// EnvVar names the folder holding the reference copies.
const EnvVar = "ANVIL_REFERENCE_DIR"

// Path is <ANVIL_REFERENCE_DIR>/<elem...>, else ../shared/reference/<elem...>
// beside the repository holding the working directory, or "" when the
// variable is unset and no go.mod is found above the working directory.
func Path(elem ...string) string {
	if dir := os.Getenv(EnvVar); dir != "" {
		// A relative setting is the checkout's, as .ci/run and
		// playwright/serve.sh read it from the checkout's root; go test
		// runs each package in its own directory.
		if !filepath.IsAbs(dir) {
			if root := Root(); root != "" {
				dir = filepath.Join(root, dir)
			} else if dir, _ = filepath.Abs(dir); dir == "" {
				return ""
			}
		}
		return filepath.Join(append([]string{dir}, elem...)...)
	}
	root := Root()
	if root == "" {
		return ""
	}
	return filepath.Join(append([]string{filepath.Dir(root), "shared", "reference"}, elem...)...)
}

// Root is the checkout holding the working directory (the folder of the
// nearest go.mod above it), or "" when there is none.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}
