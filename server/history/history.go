// Package history writes node history (Ironic's NodeEvents): state
// changes, step starts and ends, errors, and power changes seen on a BMC.
package history

import (
	"context"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
)

// Severities, as Ironic reports them.
const (
	Info    = "INFO"
	Warning = "WARNING"
	Error   = "ERROR"
)

// Event is one history entry about a node.
type Event struct {
	NodeID    int
	Severity  string
	Type      string // e.g. "provisioning", "maintenance", "power", "step"
	Message   string
	User      string
	Conductor string
}

// Record writes e with client (which may be a transaction's client).
func Record(ctx context.Context, client *ent.Client, e Event) error {
	return create(client, e).Exec(ctx)
}

// RecordAll writes events in one statement, for callers that gather many.
func RecordAll(ctx context.Context, client *ent.Client, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	rows := make([]*ent.NodeEventCreate, len(events))
	for i, e := range events {
		rows[i] = create(client, e)
	}
	return client.NodeEvent.CreateBulk(rows...).Exec(ctx)
}

func create(client *ent.Client, e Event) *ent.NodeEventCreate {
	if e.Severity == "" {
		e.Severity = Info
	}
	return client.NodeEvent.Create().
		SetUUID(uuid.NewString()).SetNodeID(e.NodeID).SetSeverity(e.Severity).
		SetEventType(e.Type).SetEvent(e.Message).SetUser(e.User).SetConductor(e.Conductor)
}
