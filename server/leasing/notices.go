package leasing

import (
	"context"
	"fmt"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/lease"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/notice"
	"github.com/anvilproject/anvil/server/inbox"
)

// EndingNotice is how long before its end a lessee is told its lease is
// ending: a day, to copy off what it needs or ask for an extension.
const EndingNotice = 24 * time.Hour

// when writes a lease time for people.
func when(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// nodeLabel names a lease's node in notices (inbox.NodeLabel); n is nil
// when the node is gone.
func nodeLabel(n *ent.Node, id string) string {
	if n == nil {
		return id
	}
	return inbox.NodeLabel(n.Name, id)
}

// tell sends ns through the inbox in tx, when there is one.
func (s *Service) tell(ctx context.Context, tx *ent.Client, ns ...inbox.Notice) error {
	if s.Inbox == nil {
		return nil
	}
	return s.Inbox.Send(ctx, tx, ns...)
}

// startedNotices tell l's lessee and owner that it started.
func startedNotices(l *ent.Lease, n *ent.Node) []inbox.Notice {
	label := nodeLabel(n, l.ResourceUUID)
	key := "started:" + l.UUID
	return []inbox.Notice{
		{Project: l.ProjectID, Kind: inbox.LeaseStarted, Key: key, Node: l.ResourceUUID, Lease: l.UUID,
			Subject: fmt.Sprintf("Your lease of node %s has started", label),
			Body: fmt.Sprintf("Project %s holds node %s until %s (lease %s). When the lease ends the node is torn down and its disks are wiped before anyone else gets it.",
				l.ProjectID, label, when(l.EndTime), describe(l))},
		{Project: l.OwnerID, Kind: inbox.LeaseStarted, Key: key, Node: l.ResourceUUID, Lease: l.UUID,
			Subject: fmt.Sprintf("Project %s's lease of node %s has started", l.ProjectID, label),
			Body:    fmt.Sprintf("Project %s holds node %s until %s (lease %s).", l.ProjectID, label, when(l.EndTime), describe(l))},
	}
}

// endedNotices tell l's lessee and owner that it ended (or was
// cancelled), and what became of the node: what says it, as the node's
// history does.
func endedNotices(l *ent.Lease, n *ent.Node, final, what string) []inbox.Notice {
	label := nodeLabel(n, l.ResourceUUID)
	verb := "ended"
	if final == StatusDeleted {
		verb = "was cancelled"
	}
	key := "ended:" + l.UUID
	return []inbox.Notice{
		{Project: l.ProjectID, Kind: inbox.LeaseEnded, Key: key, Node: l.ResourceUUID, Lease: l.UUID,
			Subject: fmt.Sprintf("Your lease of node %s %s", label, verb),
			Body:    fmt.Sprintf("Lease %s of node %s %s: %s.", describe(l), label, verb, what)},
		{Project: l.OwnerID, Kind: inbox.LeaseEnded, Key: key, Node: l.ResourceUUID, Lease: l.UUID,
			Subject: fmt.Sprintf("Project %s's lease of node %s %s", l.ProjectID, label, verb),
			Body:    fmt.Sprintf("Lease %s of node %s %s: %s.", describe(l), label, verb, what)},
	}
}

// claimedNotice tells an offer's project that l claimed it.
func claimedNotice(o *ent.Offer, l *ent.Lease, n *ent.Node) inbox.Notice {
	label := nodeLabel(n, l.ResourceUUID)
	return inbox.Notice{Project: o.ProjectID, Kind: inbox.OfferClaimed, Key: "claimed:" + l.UUID, Node: l.ResourceUUID, Lease: l.UUID,
		Subject: fmt.Sprintf("Project %s claimed node %s from your offer", l.ProjectID, label),
		Body: fmt.Sprintf("Project %s leases node %s from %s to %s (lease %s, offer %s).",
			l.ProjectID, label, when(l.StartTime), when(l.EndTime), describe(l), o.UUID)}
}

// warnEnding tells the lessees of active leases ending within
// EndingNotice that they are, once each. A lease no longer than that was
// told its end when it started.
func (s *Service) warnEnding(ctx context.Context, now time.Time) error {
	if s.Inbox == nil {
		return nil
	}
	ls, err := s.db.Lease.Query().Where(lease.Status(StatusActive), lease.EndTimeGT(now), lease.EndTimeLTE(now.Add(EndingNotice))).All(ctx)
	if err != nil {
		return err
	}
	for _, l := range ls {
		if l.EndTime.Sub(l.StartTime) <= EndingNotice {
			continue
		}
		key := "ending:" + l.UUID + ":" + Format(l.EndTime)
		told, err := s.db.Notice.Query().Where(notice.Project(l.ProjectID), notice.Key(key)).Exist(ctx)
		if err != nil {
			return err
		}
		if told {
			continue
		}
		n, err := s.db.Node.Query().Where(node.UUID(l.ResourceUUID)).Only(ctx)
		if err != nil && !ent.IsNotFound(err) {
			return err
		}
		label := nodeLabel(n, l.ResourceUUID)
		err = s.Inbox.Send(ctx, s.db.Client, inbox.Notice{Project: l.ProjectID, Kind: inbox.LeaseEnding, Key: key, Node: l.ResourceUUID, Lease: l.UUID,
			Subject: fmt.Sprintf("Your lease of node %s ends within a day", label),
			Body: fmt.Sprintf("Lease %s of node %s ends at %s. The node is then torn down and its disks are wiped: copy off what you need, or ask project %s to extend the lease.",
				describe(l), label, when(l.EndTime), l.OwnerID)})
		if err != nil {
			return err
		}
	}
	return nil
}
