// Package history writes node history (Ironic's NodeEvents): state
// changes, step starts and ends, errors, and power changes seen on a BMC.
package history

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/policies"
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
	c, err := create(ctx, client, e)
	if err != nil {
		return err
	}
	return c.Exec(ctx)
}

// RecordAll writes events in one statement, for callers that gather many.
func RecordAll(ctx context.Context, client *ent.Client, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	rows := make([]*ent.NodeEventCreate, len(events))
	for i, e := range events {
		c, err := create(ctx, client, e)
		if err != nil {
			return err
		}
		rows[i] = c
	}
	return client.NodeEvent.CreateBulk(rows...).Exec(ctx)
}

// create also records, as Ironic does, the acting project and the node's
// provision state, target and time in that state as the event is written,
// read through client so that a transaction sees its own changes.
func create(ctx context.Context, client *ent.Client, e Event) (*ent.NodeEventCreate, error) {
	if e.Severity == "" {
		e.Severity = Info
	}
	n, err := client.Node.Query().Where(node.ID(e.NodeID)).
		Select(node.FieldProvisionState, node.FieldTargetProvisionState, node.FieldProvisionUpdatedAt).Only(ctx)
	if err != nil {
		return nil, err
	}
	c := client.NodeEvent.Create().
		SetUUID(uuid.NewString()).SetNodeID(e.NodeID).SetSeverity(e.Severity).
		SetEventType(e.Type).SetEvent(e.Message).SetUser(e.User).SetConductor(e.Conductor).
		SetState(n.ProvisionState).SetNillableTargetProvisionState(n.TargetProvisionState)
	if p := policies.PrincipalFrom(ctx); p != nil {
		c.SetProject(p.Project)
	}
	if n.ProvisionUpdatedAt != nil {
		c.SetDurationSeconds(int(time.Since(*n.ProvisionUpdatedAt).Seconds()))
	}
	return c, nil
}
