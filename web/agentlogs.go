package web

import (
	"context"
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/agentlogs"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// agentLogRows are the node's kept agent logs, newest first, and
// whether the viewer may read them at all: the section is shown to a
// viewer the rule allows on a server that keeps logs, and to no one
// else. Allowed is asked first so that a viewer without the rule is not
// audited for a read the page never offered.
func (p *Portal) agentLogRows(ctx context.Context, v *nodes.View) ([]views.AgentLogRow, bool, error) {
	if p.AgentLogs == nil || !p.Guard.Allowed(ctx, agentlogs.RuleGet, nodes.Target(v.Node)) {
		return nil, false, nil
	}
	logs, err := p.AgentLogs.List(ctx, v.UUID)
	if err != nil {
		return nil, false, err
	}
	out := make([]views.AgentLogRow, len(logs))
	for i, l := range logs {
		out[i] = views.AgentLogRow{Name: l.Name, At: l.CreatedAt, Operation: l.Operation, Size: byteSize(l.Size),
			URL: "/nodes/" + v.UUID + "/agent_logs/" + l.Name}
	}
	return out, true, nil
}

// nodeAgentLog downloads one agent log: the service finds the node (404
// for one the viewer may not see) and checks the rule (403) again, as
// the API's GET does.
func (p *Portal) nodeAgentLog(c *fiber.Ctx) error {
	if p.AgentLogs == nil {
		return p.fail(c, errs.NotFound("This server keeps no agent logs."))
	}
	f, l, err := p.AgentLogs.Open(c.UserContext(), c.Params("id"), c.Params("name"))
	if err != nil {
		return p.fail(c, err)
	}
	c.Set(fiber.HeaderContentType, "application/gzip")
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="`+l.Name+`"`)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set("X-Content-Type-Options", "nosniff")
	c.Response().SetBodyStream(f, int(l.Size))
	return nil
}

// byteSize words a size the way a person compares logs: bytes below a
// KiB, then KiB or MiB with one decimal.
func byteSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}
