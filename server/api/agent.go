package api

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/clientip"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ramdisk"
)

// LookupPath and HeartbeatPath (any node, or the node in the body) are
// public, as in Ironic's public_api_routes: the ramdisk agent has no
// credentials.
const (
	LookupPath        = "/v1/lookup"
	HeartbeatPath     = "/v1/heartbeat/*"
	HeartbeatBodyPath = "/v1/heartbeat"
)

// Agent defaults Ironic hands the ramdisk in a lookup's config: its
// [metrics], [metrics_statsd] and [conductor]permitted_image_formats
// defaults, since Anvil collects no agent metrics and writes raw and
// qcow2 images.
var (
	agentMetrics = fiber.Map{"backend": "noop", "prepend_host": false, "prepend_uuid": false,
		"prepend_host_reverse": true, "global_prefix": nil}
	agentStatsd        = fiber.Map{"statsd_host": "localhost", "statsd_port": 8125}
	agentImageFormats  = []string{"raw", "qcow2", "iso"}
	agentSkipBMCDetect = map[string]bool{"redfish": true, "idrac-redfish": true}
)

func (a *API) registerAgent(v1 fiber.Router) {
	limit := func(c *fiber.Ctx) error { return c.Next() }
	if a.AgentLimit != nil {
		limit = a.AgentLimit.Middleware()
	}
	v1.Get("/lookup", limit, a.agentSource(ramdisk.RuleLookup), query("addresses", "node_uuid"), a.lookup)
	v1.Post("/heartbeat/:node", limit, a.agentSource(ramdisk.RuleHeartbeat), query(), a.heartbeat)
	// Ironic also takes the node in the body (node_ident), as tempest sends it.
	v1.Post("/heartbeat", limit, a.agentSource(ramdisk.RuleHeartbeat), query(), a.heartbeat)
}

// agentSource refuses agent calls from outside --agent-networks (403)
// before anything else is read: a caller elsewhere learns nothing of the
// nodes, and costs no query.
func (a *API) agentSource(rule string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if err := a.Ramdisk.Admit(c.UserContext(), rule, clientip.Of(c)); err != nil {
			return err
		}
		return c.Next()
	}
}

// IPXEPrefix is where iPXE fetches its scripts, without credentials as
// from Ironic's HTTP server: boot.ipxe (what DHCP names) and one per MAC.
const IPXEPrefix = "/ipxe/"

func (a *API) registerIPXE(root fiber.Router) {
	limit := func(c *fiber.Ctx) error { return c.Next() }
	if a.AgentLimit != nil {
		limit = a.AgentLimit.Middleware()
	}
	root.Get(IPXEPrefix+"boot.ipxe", limit, func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "text/plain")
		return c.SendString(ramdisk.IPXEBoot)
	})
	root.Get(IPXEPrefix+":mac", limit, a.agentSource(ramdisk.RuleIPXE), func(c *fiber.Ctx) error {
		script, err := a.Ramdisk.IPXEScript(c.UserContext(), c.Params("mac"), clientip.Of(c))
		if err != nil {
			return err
		}
		c.Set(fiber.HeaderContentType, "text/plain")
		c.Set(fiber.HeaderCacheControl, "no-store")
		return c.SendString(script)
	})
}

// lookup is Ironic's GET /v1/lookup (1.22): the agent finds its node by
// MAC addresses or UUID and, from 1.62, receives its token once.
func (a *API) lookup(c *fiber.Ctx) error {
	v := ver(c)
	if v < VerRamdisk {
		return errs.NotFound("Resource could not be found.")
	}
	uuid := c.Query("node_uuid")
	if uuid != "" && !nodes.IsUUID(uuid) {
		return errs.BadRequest("node_uuid", "Expected a UUID for node_uuid: %s", uuid)
	}
	var addrs []string
	if s := c.Query("addresses"); s != "" {
		addrs = strings.Split(s, ",")
	}
	l, err := a.Ramdisk.Lookup(c.UserContext(), addrs, uuid, v >= VerAgentToken, clientip.Of(c))
	if err != nil {
		return err
	}
	var token any
	if l.Token != "" {
		token = l.Token
	}
	b := baseURL(c)
	return c.JSON(fiber.Map{
		"node": fiber.Map{
			"uuid": l.UUID, "properties": l.Properties, "instance_info": l.InstanceInfo,
			"driver_internal_info": l.DriverInternalInfo,
			"links":                []fiber.Map{link(b+"/v1/nodes/"+l.UUID, "self"), link(b+"/nodes/"+l.UUID, "bookmark")},
		},
		"config": fiber.Map{
			"metrics": agentMetrics, "metrics_statsd": agentStatsd,
			"heartbeat_timeout":    l.HeartbeatTimeout,
			"agent_token":          token,
			"agent_token_required": true,
			// Ironic's defaults: no MD5 image checksums, deep image
			// inspection on.
			"agent_md5_checksum_enable":     false,
			"disable_deep_image_inspection": false,
			"permitted_image_formats":       agentImageFormats,
			"agent_skip_bmc_detect":         agentSkipBMCDetect[l.ManagementInterface],
		},
	})
}

type heartbeatBody struct {
	NodeIdent          *string `json:"node_ident"`
	CallbackURL        *string `json:"callback_url"`
	AgentVersion       *string `json:"agent_version"`
	AgentToken         *string `json:"agent_token"`
	AgentVerifyCA      *string `json:"agent_verify_ca"`
	AgentStatus        *string `json:"agent_status"`
	AgentStatusMessage *string `json:"agent_status_message"`
}

// heartbeat is Ironic's POST /v1/heartbeat/{node} (1.22), with the fields
// each later version added refused below it, in Ironic's words.
func (a *API) heartbeat(c *fiber.Ctx) error {
	v := ver(c)
	if v < VerRamdisk {
		return errs.NotFound("Resource could not be found.")
	}
	var body heartbeatBody
	if err := bind(c, &body); err != nil {
		return err
	}
	switch {
	case body.AgentVersion != nil && v < VerAgentVersion:
		return errs.BadRequest("agent_version", `Field "agent_version" not recognised`)
	case (body.AgentStatus != nil || body.AgentStatusMessage != nil) && v < VerAgentStatus:
		return errs.BadRequest("agent_status", `Fields "agent_status" and "agent_status_message" not recognised.`)
	case body.AgentVerifyCA != nil && v < VerAgentVerifyCA:
		return errs.BadRequest("agent_verify_ca", `Field "agent_verify_ca" not recognised in this version`)
	case body.CallbackURL == nil:
		return errs.BadRequest("callback_url", "callback_url is a required property")
	case (c.Params("node") == "") == (body.NodeIdent == nil):
		return errs.BadRequest("node_ident", "give the node in the path (/v1/heartbeat/{node}) or as node_ident in the body, once")
	}
	node := c.Params("node")
	if body.NodeIdent != nil {
		node = *body.NodeIdent
	}
	err := a.Ramdisk.Heartbeat(c.UserContext(), node, ramdisk.Heartbeat{
		CallbackURL: *body.CallbackURL, AgentVersion: body.AgentVersion, AgentToken: body.AgentToken,
		AgentVerifyCA: body.AgentVerifyCA, AgentStatus: body.AgentStatus, AgentStatusMessage: body.AgentStatusMessage,
		Source: clientip.Of(c)})
	if err != nil {
		return err
	}
	// Ironic answers 202 with no body.
	c.Status(fiber.StatusAccepted)
	return nil
}
