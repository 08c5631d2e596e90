// Package audit records who did what: every mutation becomes an AuditEvent
// row (and a log line), with the principal, the rule that decided, the
// target and the request id; denied requests are logged each and stored
// aggregated (see Denied).
package audit

import (
	"context"
	"log/slog"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/urlsafe"
)

// Request is the request-scoped information an audit row carries; the
// HTTP layer puts it in the context once per request.
type Request struct {
	ID     string
	Method string
	Path   string
}

type requestKey struct{}

// WithRequest returns ctx carrying r.
func WithRequest(ctx context.Context, r Request) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// RequestFrom returns the request info in ctx, or the zero Request for work
// that no request started (the conductor, the CLI).
func RequestFrom(ctx context.Context) Request {
	r, _ := ctx.Value(requestKey{}).(Request)
	return r
}

// Results an entry may have.
const (
	Allowed = "allowed" // a mutation that completed
	Denied  = "denied"  // refused by policy
	Failed  = "failed"  // refused after authorization (validation, conflict)
)

// Entry is one audited event.
type Entry struct {
	Rule       string
	TargetType string
	TargetID   string
	Result     string
	Status     int
	Detail     map[string]any
}

// Log writes entries to the database and the structured log.
type Log struct {
	db      *ent.Client
	log     *slog.Logger
	denials denials
}

// New returns a Log writing through db.
func New(db *ent.Client, log *slog.Logger) *Log { return &Log{db: db, log: log} }

// Done audits a completed or failed action: a failure records its
// status and error, so every caller reports outcomes the same way.
func (l *Log) Done(ctx context.Context, rule, targetType, targetID string, err error, detail map[string]any) {
	e := Entry{Rule: rule, TargetType: targetType, TargetID: targetID, Result: Allowed, Status: 200, Detail: detail}
	if err != nil {
		e.Result, e.Status = Failed, errs.Status(err)
		if e.Detail == nil {
			e.Detail = map[string]any{}
		}
		e.Detail["error"] = err.Error()
	}
	l.Record(ctx, e)
}

// Record stores e. An audit row that cannot be written is logged loudly
// but does not undo the already-committed action it describes.
func (l *Log) Record(ctx context.Context, e Entry) {
	// Detached from the request's cancellation: a client hanging up must
	// not lose the record of what it did.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.create(ctx, l.db, e).Exec(wctx); err != nil {
		l.log.Error("audit write failed", "err", err, "request_id", RequestFrom(ctx).ID, "rule", e.Rule)
	}
}

// AllowedRow is the row of an allowed mutation, for the caller to insert
// in the transaction that makes the change, so the change and its audit
// row land together or not at all, in one commit instead of two; the
// conductor inserts a whole batch's rows in one statement.
func (l *Log) AllowedRow(ctx context.Context, rule, targetType, targetID string, detail map[string]any) *ent.AuditEventCreate {
	e := Entry{Rule: rule, TargetType: targetType, TargetID: targetID, Result: Allowed, Status: 200, Detail: detail}
	return l.create(ctx, l.db, e)
}

// create logs e and returns its row for db (a client or a transaction's).
// The detail is kept without the credentials of any URL it quotes (an
// image's, a firmware update's): the audit log is no place for them.
func (l *Log) create(ctx context.Context, db *ent.Client, e Entry) *ent.AuditEventCreate {
	req := RequestFrom(ctx)
	user, project, scope := principalOf(ctx)
	l.log.LogAttrs(ctx, slog.LevelInfo, "audit",
		slog.String("request_id", req.ID), slog.String("user", user), slog.String("project", project),
		slog.String("scope", scope), slog.String("rule", e.Rule), slog.String("target", e.TargetType+"/"+e.TargetID),
		slog.String("result", e.Result), slog.Int("status", e.Status))
	return db.AuditEvent.Create().
		SetRequestID(req.ID).SetMethod(req.Method).SetPath(req.Path).
		SetUser(user).SetProject(project).SetScope(scope).
		SetRule(e.Rule).SetTargetType(e.TargetType).SetTargetID(e.TargetID).
		SetResult(e.Result).SetStatus(e.Status).SetDetail(urlsafe.StripMap(e.Detail))
}
