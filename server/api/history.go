package api

import (
	"github.com/anvilproject/anvil/ent"
)

func eventJSON(e *ent.NodeEvent, detail bool, base string, ver Version) []byte {
	w := &jw{}
	w.open()
	w.str("uuid", e.UUID)
	w.time("created_at", &e.CreatedAt)
	w.str("severity", e.Severity)
	w.str("event", e.Event)
	if detail {
		w.str("event_type", e.EventType)
		w.str("user", e.User)
		w.str("conductor", e.Conductor)
		if ver >= VerHistoryProject {
			w.proj("project", e.Project)
		}
		if ver >= VerHistoryState {
			w.proj("state", e.State)
			w.proj("target_provision_state", e.TargetProvisionState)
			w.any("duration_seconds", e.DurationSeconds)
		}
	}
	w.links(base+e.UUID, base+e.UUID)
	w.close()
	return w.b
}
