package web

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/views"
)

// ruleAuditList is the API's GET /v1/events rule, which the page shares.
const ruleAuditList = "anvil:audit:list"

const (
	// auditShown is the audit page's page size.
	auditShown = 50
	// auditExportMax caps one CSV export: past it, narrow the filters.
	auditExportMax = 100_000
)

// auditFilter reads the audit page's filters from the query string: the
// API's (user, project, rule, result), a node by UUID or name, and a time
// range. A bad value is a 400 naming its field.
func (p *Portal) auditFilter(c *fiber.Ctx) (views.AuditFilter, audit.Query, error) {
	f := views.AuditFilter{User: strings.TrimSpace(c.Query("user")), Project: strings.TrimSpace(c.Query("project")),
		Node: strings.TrimSpace(c.Query("node")), Rule: strings.TrimSpace(c.Query("rule")), Result: c.Query("result"),
		Since: c.Query("since"), Until: c.Query("until")}
	// People know users and actions by name: the user filter takes an
	// SSO user's display name too, and the rule filter part of a rule's
	// name ("power").
	q := audit.Query{Who: f.User, Project: f.Project, Action: f.Rule, Result: f.Result}
	switch f.Result {
	case "", audit.Allowed, audit.Denied, audit.Failed:
	default:
		return f, q, errs.BadRequest("result", "result: choose allowed, denied or failed, not %q", f.Result)
	}
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"since", f.Since, &q.Since}, {"until", f.Until, &q.Until}} {
		if t.v == "" {
			continue
		}
		at, err := parseWhen(t.v)
		if err != nil {
			return f, q, errs.BadRequest(t.name, "%s: give a time as 2006-01-02T15:04 (UTC) or a date, not %q", t.name, t.v)
		}
		*t.dst = at
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return f, q, errs.BadRequest("until", "until: must come after since")
	}
	if s := c.Query("marker"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return f, q, errs.BadRequest("marker", "marker: give the id of an event, not %q", s)
		}
		q.Marker = n
	}
	if f.Node != "" {
		q.TargetID = f.Node
		// A name is the node's UUID in the log. A node that is gone (or
		// was never seen) is looked for as written: its events stay.
		if v, err := p.Nodes.Get(c.UserContext(), f.Node); err == nil {
			q.TargetID = v.UUID
		} else if st := errs.Status(err); st != 404 && st != 403 {
			return f, q, err
		}
	}
	return f, q, nil
}

// parseWhen reads a time as a browser's datetime-local field sends it, in
// UTC, or RFC 3339, or a bare date (its midnight, UTC).
func parseWhen(v string) (time.Time, error) {
	var err error
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339, "2006-01-02"} {
		var t time.Time
		if t, err = time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, err
}

// auditPage shows the audit log to system readers, newest first, 50 a
// page, under the rule GET /v1/events uses.
func (p *Portal) auditPage(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, ruleAuditList, "audit", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, "Audit")
	if err != nil {
		return err
	}
	f, q, err := p.auditFilter(c)
	if err != nil {
		if errs.Status(err) >= 500 {
			return err
		}
		pg.Error = err.Error()
		return render(c, errs.Status(err), views.AuditPage(pg, views.AuditList{Filter: f}))
	}
	q.Limit = auditShown
	evs, more, err := p.Admin.Audit.List(ctx, q)
	if err != nil {
		return err
	}
	l := views.AuditList{Filter: f, Paged: q.Marker > 0, Export: "/audit/export.csv"}
	if qs := f.Values().Encode(); qs != "" {
		l.Export += "?" + qs
	}
	if l.Rows, err = p.auditRows(ctx, evs); err != nil {
		return err
	}
	if more && len(evs) > 0 {
		v := f.Values()
		v.Set("marker", strconv.Itoa(evs[len(evs)-1].ID))
		l.Older = "/audit?" + v.Encode()
	}
	return render(c, 200, views.AuditPage(pg, l))
}

func detailText(e *ent.AuditEvent) string {
	if len(e.Detail) == 0 {
		return ""
	}
	b, _ := json.Marshal(e.Detail)
	return string(b)
}

var auditColumns = []string{"id", "created_at", "request_id", "user", "project", "scope", "rule", "method", "path",
	"target_type", "target_id", "result", "status", "detail"}

// auditExport streams the events the page's filters select as CSV, the
// API's fields as columns, newest first, at most auditExportMax rows, a
// thousand read at a time so a large export never sits in memory.
func (p *Portal) auditExport(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, ruleAuditList, "audit", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	_, q, err := p.auditFilter(c)
	if err != nil {
		return p.fail(c, err)
	}
	// Read before streaming, so a broken database is a 500, not a
	// truncated file that looks whole.
	q.Limit = 1000
	evs, more, err := p.Admin.Audit.List(ctx, q)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "text/csv; charset=utf-8")
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="anvil-audit-`+time.Now().UTC().Format("20060102T150405Z")+`.csv"`)
	// The stream is written after the handler returns; the request's
	// context is done by then, its principal and values are not.
	sctx := context.WithoutCancel(ctx)
	log := p.Log
	c.Context().SetBodyStreamWriter(func(bw *bufio.Writer) {
		w := csv.NewWriter(bw)
		_ = w.Write(auditColumns)
		written := 0
		for {
			for _, e := range evs {
				if written == auditExportMax {
					w.Flush()
					return
				}
				_ = w.Write(csvSafe([]string{strconv.Itoa(e.ID), e.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000+00:00"), e.RequestID,
					e.User, e.Project, e.Scope, e.Rule, e.Method, e.Path, e.TargetType, e.TargetID, e.Result, strconv.Itoa(e.Status), detailText(e)}))
				written++
			}
			w.Flush()
			if !more || len(evs) == 0 || w.Error() != nil {
				return
			}
			q.Marker = evs[len(evs)-1].ID
			if evs, more, err = p.Admin.Audit.List(sctx, q); err != nil {
				// Headers are gone: the file ends short, and says so.
				log.Error("audit export", "err", err)
				_ = w.Write([]string{"# export stopped: " + err.Error()})
				w.Flush()
				return
			}
		}
	})
	return nil
}

// csvSafe keeps a spreadsheet from running a cell as a formula: a user
// name, path or detail beginning =, +, - or @ is anyone's to choose.
func csvSafe(row []string) []string {
	for i, v := range row {
		if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
			row[i] = "'" + v
		}
	}
	return row
}
