package api

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent"
)

// TestHistoryFieldsByVersion: a detailed history event shows project from
// 1.113 and the state fields from 1.115, as Ironic.
func TestHistoryFieldsByVersion(t *testing.T) {
	d := 7
	e := &ent.NodeEvent{UUID: "u", CreatedAt: time.Now(), Severity: "INFO", Event: "e", EventType: "provision",
		User: "alice", Project: "own", State: "manageable", TargetProvisionState: "available", DurationSeconds: &d}
	base := []string{"conductor", "created_at", "event", "event_type", "links", "severity", "user", "uuid"}
	for _, tc := range []struct {
		ver  Version
		more []string
	}{
		{VerHistory, nil},
		{VerHistoryProject - 1, nil},
		{VerHistoryProject, []string{"project"}},
		{VerHistoryState - 1, []string{"project"}},
		{VerHistoryState, []string{"project", "state", "target_provision_state", "duration_seconds"}},
	} {
		var m map[string]any
		if err := json.Unmarshal(eventJSON(e, true, "/", tc.ver), &m); err != nil {
			t.Fatal(err)
		}
		var got []string
		for k := range m {
			got = append(got, k)
		}
		want := append(slices.Clone(base), tc.more...)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: keys %v, want %v", tc.ver, got, want)
		}
		if tc.ver >= VerHistoryState && (m["state"] != "manageable" || m["duration_seconds"] != 7.0 || m["project"] != "own") {
			t.Errorf("%s: %v", tc.ver, m)
		}
	}
}
