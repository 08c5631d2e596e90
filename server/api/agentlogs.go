package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/agentlogs"
	"github.com/anvilproject/anvil/server/errs"
)

// registerAgentLogs serves the agent logs failed runs left, an Anvil
// extension at every version: the list as JSON, each log as the gzipped
// tarball the agent gave.
func (a *API) registerAgentLogs(v1 fiber.Router) {
	v1.Get("/nodes/:node/agent_logs", query(), a.listAgentLogs)
	v1.Get("/nodes/:node/agent_logs/:name", query(), a.getAgentLog)
}

func (a *API) agentLogs() (*agentlogs.Service, error) {
	if a.AgentLogs == nil {
		return nil, errs.NotFound("This server keeps no agent logs.")
	}
	return a.AgentLogs, nil
}

func (a *API) listAgentLogs(c *fiber.Ctx) error {
	s, err := a.agentLogs()
	if err != nil {
		return err
	}
	logs, err := s.List(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(logs))
	base := baseURL(c) + "/v1/nodes/" + c.Params("node") + "/agent_logs/"
	for i, l := range logs {
		out[i] = fiber.Map{"name": l.Name, "node_uuid": l.Node, "size": l.Size, "created_at": l.CreatedAt,
			"links": []fiber.Map{{"href": base + l.Name, "rel": "self"}}}
		if l.Operation != "" {
			out[i]["operation"] = l.Operation
		}
	}
	return c.JSON(fiber.Map{"agent_logs": out})
}

func (a *API) getAgentLog(c *fiber.Ctx) error {
	s, err := a.agentLogs()
	if err != nil {
		return err
	}
	f, l, err := s.Open(c.UserContext(), c.Params("node"), c.Params("name"))
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "application/gzip")
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="`+l.Name+`"`)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Response().SetBodyStream(f, int(l.Size))
	return nil
}
