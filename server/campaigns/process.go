package campaigns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/campaign"
	"github.com/anvilproject/anvil/ent/campaignnode"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/predicate"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// lostStart is how long a node may be marked running without its run
// having started before the mark is undone: the claim and the provision
// request follow each other at once, so only a conductor that stopped in
// between leaves one that old.
const lostStart = time.Minute

// Process is one conductor's pass over the campaigns: scheduled ones
// whose time came start, running nodes whose run ended get their result,
// and running campaigns start nodes while they have room. mine says
// whether this conductor's hash ring gives it a node; the room is counted
// in the database, so the cap holds across replicas.
func (s *Service) Process(ctx context.Context, mine func(n *ent.Node) bool, log *slog.Logger) error {
	now := s.now()
	if err := s.db.Campaign.Update().Where(campaign.State(StateScheduled),
		campaign.Or(campaign.StartAfterIsNil(), campaign.StartAfterLTE(now))).
		SetState(StateRunning).SetStartedAt(now).SetUpdatedAt(now).Exec(ctx); err != nil {
		return err
	}
	cs, err := s.db.Campaign.Query().Where(campaign.Or(campaign.StateIn(StateRunning, StatePaused), campaign.RunningGT(0),
		campaign.And(campaign.StateIn(finished...), campaign.FinishedAtIsNil()))).All(ctx)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if err := s.follow(ctx, c, mine, log); err != nil {
			return err
		}
		if err := s.settle(ctx, c.ID); err != nil {
			return err
		}
		if err := s.start(ctx, c.ID, mine, log); err != nil {
			return err
		}
		if err := s.settle(ctx, c.ID); err != nil {
			return err
		}
	}
	return nil
}

// runStates are the states of a node's clean or service run in progress.
var runStates = []string{nodes.StateCleaning, nodes.StateCleanWait, conductor.StateCleanHold,
	nodes.StateServicing, nodes.StateServiceWait, conductor.StateServiceHold}

// follow records the result of each running node of c (this conductor's)
// whose run ended: succeeded when the node is back in its stable state
// without a fault, failed with its last error otherwise.
func (s *Service) follow(ctx context.Context, c *ent.Campaign, mine func(n *ent.Node) bool, log *slog.Logger) error {
	rows, err := c.QueryNodes().Where(campaignnode.Status(NodeRunning)).All(ctx)
	if err != nil {
		return err
	}
	ns, err := s.nodesOf(ctx, rows)
	if err != nil {
		return err
	}
	for _, r := range rows {
		n := ns[r.NodeUUID]
		if n == nil {
			if err := s.release(ctx, c.ID, r.ID, NodeFailed, "the node was deleted during its run"); err != nil {
				return err
			}
			continue
		}
		if !mine(n) {
			continue
		}
		started := n.ProvisionUpdatedAt != nil && r.StartedAt != nil && !n.ProvisionUpdatedAt.Before(*r.StartedAt)
		switch {
		case slices.Contains(runStates, n.ProvisionState) || n.TargetProvisionState != nil:
			continue
		case !started:
			// Marked running but its run never began: the conductor
			// stopped between the two. Back to pending, once the start
			// would surely have happened.
			if r.StartedAt != nil && time.Since(*r.StartedAt) > lostStart {
				if err := s.release(ctx, c.ID, r.ID, NodePending, ""); err != nil {
					return err
				}
			}
			continue
		}
		status, why := NodeSucceeded, ""
		switch {
		case n.ProvisionState == nodes.StateCleanFailed || n.ProvisionState == nodes.StateServiceFailed:
			status, why = NodeFailed, deref(n.LastError)
			if why == "" {
				why = "the run ended in " + n.ProvisionState
			}
		case n.Fault != nil && *n.Fault != "":
			status, why = NodeFailed, "the node has fault "+*n.Fault
		case n.ProvisionState != nodes.StateManageable && n.ProvisionState != nodes.StateActive:
			status, why = NodeFailed, "the node left the run for "+n.ProvisionState
		}
		if err := s.release(ctx, c.ID, r.ID, status, why); err != nil {
			return err
		}
		log.Info("campaign node finished", "campaign", c.UUID, "node", r.NodeUUID, "status", status)
	}
	return nil
}

// nodesOf loads the nodes of rows in one query, by UUID; a deleted node
// is absent from the map.
func (s *Service) nodesOf(ctx context.Context, rows []*ent.CampaignNode) (map[string]*ent.Node, error) {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.NodeUUID
	}
	ns, err := s.db.Node.Query().Where(node.UUIDIn(ids...)).All(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*ent.Node, len(ns))
	for _, n := range ns {
		out[n.UUID] = n
	}
	return out, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// release moves a running row to status and gives its place back, in one
// transaction so the campaign's running count never drifts from its rows;
// a row another conductor already moved is left alone.
func (s *Service) release(ctx context.Context, campaignID, rowID int, status, why string) error {
	moved := false
	err := store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		u := tx.CampaignNode.Update().Where(campaignnode.ID(rowID), campaignnode.Status(NodeRunning)).SetStatus(status)
		if status == NodePending {
			u.ClearStartedAt().ClearRun()
		} else {
			// At the millisecond, as started_at is: a node claimed
			// right after this release never seems to start before it
			// finished.
			u.SetFinishedAt(time.Now().Truncate(time.Millisecond))
		}
		if why != "" {
			u.SetReason(why)
		}
		if status == NodePending {
			u.SetBatch(0)
		}
		n, err := u.Save(ctx)
		if err != nil || n == 0 {
			return err
		}
		moved = true
		cu := tx.Campaign.Update().Where(campaign.ID(campaignID)).AddRunning(-1).SetUpdatedAt(time.Now())
		if status == NodePending {
			// The node never ran: its place in the batch is free again.
			cu.AddBatchStarted(-1)
		}
		if err := cu.Exec(ctx); err != nil {
			return err
		}
		// The last node of a full batch finished: the batch pause
		// counts from now.
		return tx.Campaign.Update().Where(campaign.ID(campaignID), campaign.Running(0), campaign.BatchDoneAtIsNil(),
			predicate.Campaign(entsql.FieldsGTE(campaign.FieldBatchStarted, campaign.FieldMaxConcurrency))).
			SetBatchDoneAt(s.now()).Exec(ctx)
	})
	if err == nil && moved && status != NodePending {
		// Back to pending is no outcome: the node runs later.
		s.Metrics.count(status, 1)
	}
	return err
}

// settle ends a campaign whose failure budget is spent (failed: no new
// starts, the pending nodes skipped, the running ones finish) and one
// with nothing left to run (completed, or the finish time of a failed or
// cancelled one). A paused campaign whose last nodes finished completes
// too: resuming it would start nothing, so "paused" would only hide that
// it is over.
func (s *Service) settle(ctx context.Context, id int) error {
	c, err := s.db.Campaign.Get(ctx, id)
	if err != nil {
		return err
	}
	counts, err := s.counts(ctx, []int{id})
	if err != nil {
		return err
	}
	k := counts[id]
	now := time.Now()
	if k.Failed > c.MaxFailures && !slices.Contains(finished, c.State) {
		changed, skipped := false, 0
		err := store.WithTx(ctx, s.db, func(tx *ent.Client) error {
			n, err := tx.Campaign.Update().Where(campaign.ID(id), campaign.StateNotIn(finished...)).
				SetState(StateFailed).SetUpdatedAt(now).Save(ctx)
			if err != nil || n == 0 {
				return err
			}
			changed = true
			skipped, err = skipPending(ctx, tx, id, fmt.Sprintf("the failure budget (%d) was exceeded", c.MaxFailures))
			return err
		})
		if err != nil || !changed {
			// Another replica failed it first, and audited it.
			return err
		}
		s.Metrics.count(NodeSkipped, skipped)
		s.guard.Done(s.conductorCtx(ctx), EventFailureBudget, "campaign", c.UUID, nil,
			map[string]any{"failed": k.Failed, "max_failures": c.MaxFailures})
		return nil
	}
	if k.Pending > 0 || k.Running > 0 || c.Running > 0 {
		return nil
	}
	from := c.State
	switch {
	case c.State == StateRunning || c.State == StatePaused:
		c.State = StateCompleted
	case !slices.Contains(finished, c.State) || c.FinishedAt != nil:
		return nil
	}
	detail := map[string]any{"state": c.State, "succeeded": k.Succeeded, "failed": k.Failed, "skipped": k.Skipped}
	if from != c.State {
		// It ended here: say from what, so a paused campaign's completion
		// reads as such in the log.
		detail["from"] = from
	}
	// The end and its audit row commit together: whoever sees the
	// campaign finished finds the record of it.
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		var n int
		var err error
		if from != c.State {
			n, err = tx.Campaign.Update().Where(campaign.ID(id), campaign.State(from)).
				SetState(c.State).SetFinishedAt(now).SetUpdatedAt(now).Save(ctx)
		} else {
			n, err = tx.Campaign.Update().Where(campaign.ID(id), campaign.FinishedAtIsNil()).SetFinishedAt(now).Save(ctx)
		}
		if err != nil || n == 0 {
			// Nothing ended here, or another replica ended it and audited it.
			return err
		}
		return tx.AuditEvent.CreateBulk(s.guard.Audit.AllowedRow(s.conductorCtx(ctx), EventFinish, "campaign", c.UUID, detail)).Exec(ctx)
	})
}

// conductorCtx acts as the conductor itself, for what no request asked.
func (s *Service) conductorCtx(ctx context.Context) context.Context {
	return policies.WithPrincipal(ctx, &policies.Principal{User: "conductor", System: true, Method: "conductor"})
}

// errFull ends a claim when the campaign has no room or stopped running.
var errFull = errors.New("campaign full")

// claim takes one place in the campaign and the node's row (pending to
// running) together, so the cap holds across replicas and no node is
// started twice. The place is taken with a conditional UPDATE on the
// campaign's counts while it runs: in the current batch while it has
// fewer than max_concurrency nodes, else as the first of the next batch
// once that is due (at once when the campaign rolls on without a
// batch_pause; with one, when the last batch's nodes all finished and the
// pause since passed). It returns the batch the node starts in, and
// whether it opened that batch.
func (s *Service) claim(ctx context.Context, c *ent.Campaign, r *ent.CampaignNode, run string, at time.Time) (batch int, opened bool, err error) {
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		room := predicate.Campaign(entsql.FieldsLT(campaign.FieldRunning, campaign.FieldMaxConcurrency))
		n, err := tx.Campaign.Update().Where(campaign.ID(c.ID), campaign.State(StateRunning), room, campaign.BatchGT(0),
			predicate.Campaign(entsql.FieldsLT(campaign.FieldBatchStarted, campaign.FieldMaxConcurrency))).
			AddRunning(1).AddBatchStarted(1).Save(ctx)
		if err != nil {
			return err
		}
		opened = n == 0
		if opened {
			due := campaign.Or(campaign.Batch(0), campaign.BatchPause(0))
			if c.BatchPause > 0 {
				due = campaign.Or(campaign.Batch(0), campaign.And(campaign.Running(0),
					campaign.BatchDoneAtLTE(s.now().Add(-time.Duration(c.BatchPause)*time.Second))))
			}
			n, err = tx.Campaign.Update().Where(campaign.ID(c.ID), campaign.State(StateRunning), room, due).
				AddRunning(1).AddBatch(1).SetBatchStarted(1).ClearBatchDoneAt().Save(ctx)
			if err != nil {
				return err
			}
			if n == 0 {
				return errFull
			}
		}
		cur, err := tx.Campaign.Get(ctx, c.ID)
		if err != nil {
			return err
		}
		batch = cur.Batch
		n, err = tx.CampaignNode.Update().Where(campaignnode.ID(r.ID), campaignnode.Status(NodePending)).
			SetStatus(NodeRunning).SetStartedAt(at).SetRun(run).SetBatch(batch).ClearReason().Save(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return errClaimLost
		}
		return nil
	})
	switch {
	case errors.Is(err, errFull):
		return 0, false, errFull
	case errors.Is(err, errClaimLost):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return batch, opened, nil
}

var errClaimLost = errors.New("claim lost")

// start starts this conductor's pending nodes of a running campaign, in
// their order, while it has room. Each is authorized as the campaign's
// creator now, through the same provision request the API serves: a node
// that is busy or locked waits for a later pass; one in maintenance, or
// that the creator may no longer run the runbook on, is skipped with the
// reason.
func (s *Service) start(ctx context.Context, id int, mine func(n *ent.Node) bool, log *slog.Logger) (err error) {
	// Places are claimed one after the other, in the nodes' order; the
	// provision requests, which take the time, go out startWorkers at a
	// time, and the pass returns once they all answered.
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		runErr error
	)
	sem := make(chan struct{}, startWorkers)
	defer func() {
		wg.Wait()
		err = errors.Join(err, runErr)
	}()
	c, err := s.db.Campaign.Get(ctx, id)
	if err != nil || c.State != StateRunning || c.Running >= c.MaxConcurrency {
		return err
	}
	if w := WindowOf(c); w != nil && !w.Open(s.now()) {
		// Outside its window the campaign stays running and starts nothing.
		return nil
	}
	as := policies.WithPrincipal(ctx, principalOf(c.Principal))
	last := -1
	for {
		rows, err := c.QueryNodes().Where(campaignnode.Status(NodePending), campaignnode.PositionGT(last)).
			Order(ent.Asc(campaignnode.FieldPosition)).Limit(200).All(ctx)
		if err != nil || len(rows) == 0 {
			return err
		}
		// One query for the page's nodes: what is read here only
		// decides whether to try; the provision request decides again
		// under the node's lock.
		ns, err := s.nodesOf(ctx, rows)
		if err != nil {
			return err
		}
		for _, r := range rows {
			last = r.Position
			n := ns[r.NodeUUID]
			if n == nil {
				if err := s.skip(ctx, r.ID, "the node was deleted"); err != nil {
					return err
				}
				continue
			}
			if !mine(n) {
				continue
			}
			switch {
			case n.Maintenance:
				if err := s.skip(ctx, r.ID, "the node is in maintenance: "+deref(n.MaintenanceReason)); err != nil {
					return err
				}
				continue
			case n.Reservation != nil || n.TargetProvisionState != nil:
				continue // busy or locked: a later pass
			case n.ProvisionState != nodes.StateManageable && n.ProvisionState != nodes.StateActive:
				if strings.HasSuffix(n.ProvisionState, "ing") || strings.Contains(n.ProvisionState, "wait") {
					continue
				}
				if err := s.skip(ctx, r.ID, "runbooks run on manageable or active nodes; this node is "+n.ProvisionState); err != nil {
					return err
				}
				continue
			}
			run := "clean"
			if n.ProvisionState == nodes.StateActive {
				run = "service"
			}
			at := time.Now().Truncate(time.Millisecond)
			batch, opened, err := s.claim(ctx, c, r, run, at)
			if errors.Is(err, errFull) {
				return nil
			}
			if err != nil || batch == 0 {
				return err
			}
			if opened {
				s.batchEvents(ctx, c, batch)
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := s.launch(as, c, r, n.UUID, run, log); err != nil {
					mu.Lock()
					runErr = errors.Join(runErr, err)
					mu.Unlock()
				}
			}()
		}
	}
}

// startWorkers bounds one pass's provision requests in flight.
const startWorkers = 16

// launch starts a claimed node's run as the campaign's creator (as). A
// node taken by something else first, or a fault of ours, goes back to
// pending for a later pass; one the creator may no longer run it on
// (404, 403, 400) is skipped with the reason.
func (s *Service) launch(as context.Context, c *ent.Campaign, r *ent.CampaignNode, node, run string, log *slog.Logger) error {
	err := s.ops.Provision(as, node, conductor.ProvisionRequest{Target: run, Runbook: c.Runbook})
	switch {
	case err == nil:
		log.Info("campaign node started", "campaign", c.UUID, "node", node, "run", run)
		s.Metrics.count("started", 1)
		return nil
	case errs.IsLocked(err) || errs.Status(err) == 409 || errs.Status(err) >= 500:
		if errs.Status(err) >= 500 {
			log.Error("campaign node start", "campaign", c.UUID, "node", node, "err", err)
		}
		return s.release(as, c.ID, r.ID, NodePending, "")
	}
	return s.release(as, c.ID, r.ID, NodeSkipped, err.Error())
}

// batchEvents audits a batch's start, and the campaign's with its first.
func (s *Service) batchEvents(ctx context.Context, c *ent.Campaign, batch int) {
	as := s.conductorCtx(ctx)
	if batch == 1 {
		s.guard.Done(as, EventStart, "campaign", c.UUID, nil, map[string]any{"name": c.Name, "runbook": c.RunbookName})
	}
	s.guard.Done(as, EventBatch, "campaign", c.UUID, nil, map[string]any{"batch": batch, "max_concurrency": c.MaxConcurrency})
}

func (s *Service) skip(ctx context.Context, rowID int, why string) error {
	n, err := s.db.CampaignNode.Update().Where(campaignnode.ID(rowID), campaignnode.Status(NodePending)).
		SetStatus(NodeSkipped).SetReason(why).SetFinishedAt(time.Now()).Save(ctx)
	s.Metrics.count(NodeSkipped, n)
	return err
}
