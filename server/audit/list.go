package audit

import (
	"context"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/predicate"
)

// Query filters the audit log. Marker is the id of the last event of the
// previous page; pages run newest first.
type Query struct {
	User, Project, Result, Rule, TargetID string
	Limit, Marker                         int
	// Since and Until, when set, keep events at or after Since and before
	// Until.
	Since, Until time.Time
	// The portal's filters, for people who know names rather than ids:
	// Who is a local account's name or an SSO user's display name (the
	// log keeps the latter inside "sso:subject@issuer (name)"); Action is
	// part of a rule's name, such as "power".
	Who, Action string
}

// List returns events matching q, newest first, and whether more follow.
// Authorization is the caller's: the audit log is readable by system
// readers only, a decision made where the request arrives.
func (l *Log) List(ctx context.Context, q Query) ([]*ent.AuditEvent, bool, error) {
	// Denials noted but not yet written are part of the answer.
	l.Flush(ctx)
	var ps []predicate.AuditEvent
	for _, f := range []struct {
		v string
		p func(string) predicate.AuditEvent
	}{
		{q.User, auditevent.User}, {q.Project, auditevent.Project}, {q.Result, auditevent.Result},
		{q.Rule, auditevent.Rule}, {q.TargetID, auditevent.TargetID},
	} {
		if f.v != "" {
			ps = append(ps, f.p(f.v))
		}
	}
	if q.Who != "" {
		ps = append(ps, auditevent.Or(auditevent.User(q.Who),
			auditevent.And(auditevent.UserHasPrefix("sso:"), auditevent.UserHasSuffix(" ("+q.Who+")"))))
	}
	if q.Action != "" {
		ps = append(ps, auditevent.RuleContainsFold(q.Action))
	}
	if !q.Since.IsZero() {
		ps = append(ps, auditevent.CreatedAtGTE(q.Since))
	}
	if !q.Until.IsZero() {
		ps = append(ps, auditevent.CreatedAtLT(q.Until))
	}
	if q.Marker > 0 {
		ps = append(ps, auditevent.IDLT(q.Marker))
	}
	if q.Limit <= 0 || q.Limit > 1000 {
		q.Limit = 1000
	}
	evs, err := l.db.AuditEvent.Query().Where(ps...).Order(ent.Desc(auditevent.FieldID)).Limit(q.Limit + 1).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(evs) > q.Limit
	if more {
		evs = evs[:q.Limit]
	}
	return evs, more, nil
}
