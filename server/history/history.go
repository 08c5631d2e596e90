// Package history writes node history (Ironic's NodeEvents): state
// changes, step starts and ends, errors, and power changes seen on a BMC.
package history

import (
	"context"
	"fmt"
	"slices"
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
	// Project is the acting project; when empty, the one of the context
	// the event is recorded with.
	Project string
}

// Record writes e with client (which may be a transaction's client).
func Record(ctx context.Context, client *ent.Client, e Event) error {
	return RecordAll(ctx, client, []Event{e})
}

// RecordAll writes events in one statement, for callers that gather many.
// It also records, as Ironic does, the acting project and each node's
// provision state, target and time in that state as the events are
// written, read through client so that a transaction sees its own
// changes: in one query for all the nodes, since the conductor's grouped
// commits carry the events of a hundred nodes at a time.
func RecordAll(ctx context.Context, client *ent.Client, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	ids := make([]int, 0, len(events))
	for _, e := range events {
		ids = append(ids, e.NodeID)
	}
	slices.Sort(ids)
	ns, err := client.Node.Query().Where(node.IDIn(slices.Compact(ids)...)).
		Select(node.FieldID, node.FieldProvisionState, node.FieldTargetProvisionState, node.FieldProvisionUpdatedAt).All(ctx)
	if err != nil {
		return err
	}
	byID := make(map[int]*ent.Node, len(ns))
	for _, n := range ns {
		byID[n.ID] = n
	}
	p := policies.PrincipalFrom(ctx)
	rows := make([]*ent.NodeEventCreate, len(events))
	for i, e := range events {
		n, ok := byID[e.NodeID]
		if !ok {
			return fmt.Errorf("node %d: %w", e.NodeID, &ent.NotFoundError{})
		}
		if e.Severity == "" {
			e.Severity = Info
		}
		c := client.NodeEvent.Create().
			SetUUID(uuid.NewString()).SetNodeID(e.NodeID).SetSeverity(e.Severity).
			SetEventType(e.Type).SetEvent(e.Message).SetUser(e.User).SetConductor(e.Conductor).
			SetState(n.ProvisionState).SetNillableTargetProvisionState(n.TargetProvisionState)
		switch {
		case e.Project != "":
			c.SetProject(e.Project)
		case p != nil:
			c.SetProject(p.Project)
		}
		if n.ProvisionUpdatedAt != nil {
			c.SetDurationSeconds(int(time.Since(*n.ProvisionUpdatedAt).Seconds()))
		}
		rows[i] = c
	}
	return client.NodeEvent.CreateBulk(rows...).Exec(ctx)
}
