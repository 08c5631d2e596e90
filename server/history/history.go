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
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/urlsafe"
)

// Severities, as Ironic reports them.
const (
	Info    = "INFO"
	Warning = "WARNING"
	Error   = "ERROR"
)

// Event is one history entry about a node.
type Event struct {
	NodeID   int
	Severity string
	Type     string // e.g. "provisioning", "maintenance", "power", "step"
	Message  string
	// Detail is the raw text behind a failure, for system-scope readers
	// only; BMCError classifies a BMC failure (see Failed).
	Detail    string
	BMCError  map[string]any
	User      string
	Conductor string
	// Project is the acting project; when empty, the one of the context
	// the event is recorded with.
	Project string
}

// Failed makes e an error event saying msg and err's summary, which any
// reader of the node may see; err's whole text, the BMC's address and
// answer included, becomes the detail only system-scope readers see, and
// a BMC failure's class is kept beside them.
func (e *Event) Failed(msg string, err error) {
	e.Severity = Error
	sum := bmc.Summary(err)
	e.Message = msg + sum
	if full := err.Error(); full != sum {
		e.Detail = full
	}
	if c, ok := bmc.ClassOf(err); ok {
		e.BMCError = map[string]any{"kind": c.Kind}
		if c.Reason != "" {
			e.BMCError["reason"] = c.Reason
		}
		if c.Status != 0 {
			e.BMCError["status"] = c.Status
		}
	}
}

// Record writes e with client (which may be a transaction's client).
func Record(ctx context.Context, client *ent.Client, e Event) error {
	return RecordAll(ctx, client, []Event{e})
}

// RecordAll writes events in one statement, for callers that gather many.
// Any URL an event quotes is kept without its credentials (urlsafe.Text),
// for every reader, operators included.
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
			SetEventType(e.Type).SetEvent(urlsafe.Text(e.Message)).SetDetail(urlsafe.Text(e.Detail)).SetUser(e.User).SetConductor(e.Conductor).
			SetState(n.ProvisionState).SetNillableTargetProvisionState(n.TargetProvisionState)
		if e.BMCError != nil {
			c.SetBmcError(e.BMCError)
		}
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
