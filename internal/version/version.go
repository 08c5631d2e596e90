// Package version says which build of Anvil is running. Release builds
// (go tool task package) set Version, Commit and Date with -ldflags -X;
// a plain go build leaves them empty, and Get then falls back to the VCS
// stamp the Go toolchain records in the binary, so even a developer's
// build can name its commit.
package version

import (
	"fmt"
	"runtime/debug"
)

// Set at link time: -X github.com/anvilproject/anvil/internal/version.Version=v1.2.3
// (and .Commit, .Date). Variables, not constants, because -X can only set
// string variables.
var (
	Version string
	Commit  string
	Date    string
)

// Info is one build's identity.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Date    string `json:"date"`
	// Modified is true when the build's work tree had uncommitted changes
	// (known only from the VCS stamp).
	Modified bool `json:"modified,omitempty"`
}

// String is the one line `anvil version` prints.
func (i Info) String() string {
	commit := i.Commit
	if i.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("anvil %s commit %s built %s", i.Version, commit, i.Date)
}

// Get returns the link-time values, filling what is unset from the build
// info; "dev" and "unknown" stand for what neither knows (go test, go run
// outside a checkout).
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(bi)
}

func get(bi *debug.BuildInfo) Info {
	i := Info{Version: Version, Commit: Commit, Date: Date}
	if bi != nil {
		var vcsRev, vcsTime string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if i.Commit == "" && vcsRev != "" {
			i.Commit, i.Modified = vcsRev, dirty
		}
		if i.Date == "" {
			// The commit's time: the toolchain records no build time, and
			// it keeps a rebuild of one commit reproducible.
			i.Date = vcsTime
		}
		// A module version ("v1.2.3") when built with go install
		// module@version; "(devel)" for a build inside the checkout.
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	if i.Date == "" {
		i.Date = "unknown"
	}
	return i
}
