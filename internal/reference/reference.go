// Package reference finds the shared reference copies the tests run (the
// Redfish simulator, the real agent), which sit beside the repository at
// ../shared/reference.
//
// It starts from the working directory, where go test runs each package,
// rather than from the source file's path: the suite builds with -trimpath
// (so a fresh clone reuses the build cache), which leaves no absolute
// path in the binary.
package reference

import (
	"os"
	"path/filepath"
)

// Path is ../shared/reference/<elem...> beside the repository holding the
// working directory, or "" when no go.mod is found above it.
func Path(elem ...string) string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(append([]string{filepath.Dir(dir), "shared", "reference"}, elem...)...)
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}
