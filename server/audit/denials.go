package audit

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/anvilproject/anvil/policies"
)

// Denials are aggregated rather than written one row per request: a
// caller probing ten thousand node ids must not add ten thousand rows, and
// a refused request must not take a database write longer than a request
// for something that does not exist (which would tell the two apart). Each
// window holds at most one row per principal, rule and target type, with
// the count, the first and last time and a few sample targets.
const (
	denialWindow     = 10 * time.Second
	denialSamples    = 10
	maxDenialBuckets = 10000
)

type denialKey struct {
	user, project, scope, rule, targetType, result string
	status                                         int
}

type denialBucket struct {
	count                   int
	first, last             time.Time
	targets                 []string
	requestID, method, path string
}

type denials struct {
	mu      sync.Mutex
	buckets map[denialKey]*denialBucket
	dropped int
}

// Denied notes a refused request for the next aggregated row; the log line
// is written at once.
func (l *Log) Denied(ctx context.Context, e Entry) {
	e.Result, e.Status = Denied, 403
	l.Aggregate(ctx, e)
}

// Aggregate notes e for the next aggregated row, as Denied does: for
// events anyone can cause in bulk without credentials, such as a ramdisk
// agent's failed lookups and heartbeats, which must not take one row
// each. The log line is written at once.
func (l *Log) Aggregate(ctx context.Context, e Entry) {
	req := RequestFrom(ctx)
	k := denialKey{rule: e.Rule, targetType: e.TargetType, result: e.Result, status: e.Status}
	k.user, k.project, k.scope = principalOf(ctx)
	l.log.LogAttrs(ctx, slog.LevelInfo, "audit",
		slog.String("request_id", req.ID), slog.String("user", k.user), slog.String("project", k.project),
		slog.String("scope", k.scope), slog.String("rule", e.Rule), slog.String("target", e.TargetType+"/"+e.TargetID),
		slog.String("result", e.Result), slog.Int("status", e.Status))
	now := time.Now()
	d := &l.denials
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.buckets == nil {
		d.buckets = map[denialKey]*denialBucket{}
	}
	b := d.buckets[k]
	if b == nil {
		if len(d.buckets) >= maxDenialBuckets {
			d.dropped++
			return
		}
		b = &denialBucket{first: now, requestID: req.ID, method: req.Method, path: req.Path}
		d.buckets[k] = b
	}
	b.count++
	b.last = now
	if e.TargetID != "" && len(b.targets) < denialSamples {
		b.targets = append(b.targets, e.TargetID)
	}
}

// Flush writes the aggregated denials and events noted so far.
func (l *Log) Flush(ctx context.Context) {
	d := &l.denials
	d.mu.Lock()
	buckets, dropped := d.buckets, d.dropped
	d.buckets, d.dropped = nil, 0
	d.mu.Unlock()
	if dropped > 0 {
		l.log.Warn("audit: denials beyond the aggregation limit were logged but not stored", "count", dropped)
	}
	for k, b := range buckets {
		target := ""
		if len(b.targets) == 1 && b.count == 1 {
			target = b.targets[0]
		}
		detail := map[string]any{"count": b.count, "first": b.first.UTC().Format(time.RFC3339Nano), "last": b.last.UTC().Format(time.RFC3339Nano)}
		if len(b.targets) > 0 {
			detail["targets"] = b.targets
		}
		err := l.db.AuditEvent.Create().
			SetRequestID(b.requestID).SetMethod(b.method).SetPath(b.path).
			SetUser(k.user).SetProject(k.project).SetScope(k.scope).
			SetRule(k.rule).SetTargetType(k.targetType).SetTargetID(target).
			SetResult(k.result).SetStatus(k.status).SetDetail(detail).
			Exec(ctx)
		if err != nil {
			l.log.Error("audit write failed", "err", err, "rule", k.rule, "denials", b.count)
		}
	}
}

// Run flushes denials every window until ctx ends, then once more.
func (l *Log) Run(ctx context.Context) {
	t := time.NewTicker(denialWindow)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.Flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			l.Flush(ctx)
		}
	}
}

func principalOf(ctx context.Context) (user, project, scope string) {
	if p := policies.PrincipalFrom(ctx); p != nil {
		user, project, scope = p.User, p.Project, "project"
		// An SSO user's name is only a display name and may equal a
		// local account's; the record must not confuse the two.
		if !p.Local() {
			user = "sso:" + p.Subject + "@" + p.Issuer + " (" + p.User + ")"
		}
		if p.System {
			scope = "system"
		}
	}
	return user, project, scope
}
