package leasing

import (
	"context"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/lease"
	"github.com/anvilproject/anvil/server/errs"
)

// counted are the statuses of leases a quota counts: booked, running,
// ending or over. A lease cancelled before it started used nothing.
var counted = []string{StatusCreated, StatusWaitFulfill, StatusActive, StatusError, StatusWaitExpire, StatusWaitCancel, StatusExpired, StatusDeleted}

// checkQuota refuses, with the numbers, a lease of project from start to
// end that would hold more nodes at once than Quota.MaxNodes or cover more
// node-hours in a calendar month than Quota.MaxNodeHours. skip is the
// lease being extended, counted as the new one.
func (s *Service) checkQuota(ctx context.Context, tx *ent.Client, project, skip string, start, end time.Time) error {
	if s.Quota.MaxNodes == 0 && s.Quota.MaxNodeHours == 0 {
		return nil
	}
	if err := s.lockProject(ctx, tx, project); err != nil {
		return err
	}
	from := time.Date(start.Year(), start.Month(), 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(end.Year(), end.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, 1, 0)
	q := tx.Lease.Query().Where(lease.ProjectID(project), lease.StatusIn(counted...), lease.StartTimeLT(to), lease.EndTimeGT(from))
	if skip != "" {
		q = q.Where(lease.UUIDNEQ(skip))
	}
	ls, err := q.All(ctx)
	if err != nil {
		return err
	}
	if s.Quota.MaxNodes > 0 {
		nodes := map[string]bool{}
		for _, l := range ls {
			if l.Status != StatusExpired && l.Status != StatusDeleted && l.StartTime.Before(end) && l.EndTime.After(start) {
				nodes[l.ResourceUUID] = true
			}
		}
		if len(nodes)+1 > s.Quota.MaxNodes {
			return errs.Forbidden("Quota exceeded: project %s would hold %d leased nodes from %s to %s; its quota is %d (--lease-max-nodes).",
				project, len(nodes)+1, Format(start), Format(end), s.Quota.MaxNodes)
		}
	}
	if s.Quota.MaxNodeHours > 0 {
		for m := from; m.Before(to); m = m.AddDate(0, 1, 0) {
			next := m.AddDate(0, 1, 0)
			used := 0.0
			for _, l := range ls {
				used += NodeHours(l, m, next)
			}
			want := hoursWithin(start, end, m, next)
			if used+want > float64(s.Quota.MaxNodeHours) {
				return errs.Forbidden("Quota exceeded: project %s has leases for %.1f node-hours in %s and asks %.1f more; its quota is %d node-hours a month (--lease-max-node-hours).",
					project, used, m.Format("2006-01"), want, s.Quota.MaxNodeHours)
			}
		}
	}
	return nil
}

// NodeHours is how many node-hours of lease l fall in [from, to): its
// window, or for a cancelled lease the hours it ran, none if it never
// did. Quotas and the portal's usage report count alike with it.
func NodeHours(l *ent.Lease, from, to time.Time) float64 {
	last := l.EndTime
	if l.Status == StatusDeleted && l.ExpireTime != nil && l.ExpireTime.Before(last) {
		if l.FulfillTime == nil {
			return 0
		}
		last = *l.ExpireTime
	}
	return hoursWithin(l.StartTime, last, from, to)
}

// hoursWithin is how many hours of [start, end) fall in [from, to).
func hoursWithin(start, end, from, to time.Time) float64 {
	if start.Before(from) {
		start = from
	}
	if end.After(to) {
		end = to
	}
	if !end.After(start) {
		return 0
	}
	return end.Sub(start).Hours()
}
