package version

import (
	"runtime/debug"
	"testing"
)

func TestGet(t *testing.T) {
	stamp := &debug.BuildInfo{
		Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.time", Value: "2026-11-26T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, c := range []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  Info
	}{
		{"nothing known", "", "", "", nil, Info{Version: "dev", Commit: "unknown", Date: "unknown"}},
		{"VCS stamp only", "", "", "", stamp, Info{Version: "dev", Commit: "abc123", Date: "2026-11-26T10:00:00Z", Modified: true}},
		{"ldflags win", "v1.0.0", "def456", "2026-11-26T12:00:00Z", stamp, Info{Version: "v1.0.0", Commit: "def456", Date: "2026-11-26T12:00:00Z"}},
		{"module version", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, Info{Version: "v0.3.0", Commit: "unknown", Date: "unknown"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			Version, Commit, Date = c.version, c.commit, c.date
			t.Cleanup(func() { Version, Commit, Date = "", "", "" })
			if got := get(c.bi); got != c.want {
				t.Errorf("get = %+v, want %+v", got, c.want)
			}
		})
	}
	if s := (Info{Version: "v1", Commit: "abc", Date: "d", Modified: true}).String(); s != "anvil v1 commit abc (modified) built d" {
		t.Errorf("String = %q", s)
	}
}
