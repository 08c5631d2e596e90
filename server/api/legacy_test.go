package api

import (
	"testing"

	"github.com/anvilproject/anvil/server/nodes"
)

// TestLegacyProvisionState: Ironic's update_state_in_older_versions.
func TestLegacyProvisionState(t *testing.T) {
	for _, tc := range []struct {
		state string
		ver   Version
		want  *string
	}{
		{nodes.StateAvailable, 1, nil},
		{nodes.StateAvailable, 2, ptr(nodes.StateAvailable)},
		{"inspect wait", 38, ptr("inspecting")},
		{"inspect wait", 1, ptr("inspecting")},
		{"inspect wait", 39, ptr("inspect wait")},
		{nodes.StateEnroll, 1, ptr(nodes.StateEnroll)},
	} {
		got := legacyProvisionState(tc.state, tc.ver)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%q at %s: got %v, want %v", tc.state, tc.ver, got, tc.want)
		}
	}
}

func ptr(s string) *string { return &s }
