package api

import (
	"encoding/json"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ports"
	"github.com/anvilproject/anvil/server/ramdisk"
)

// ruleContinueInspection governs the inspection ramdisk's callback, as
// Ironic names it; its default lets anyone, since the ramdisk has no
// credentials and the route needs no authentication.
const ruleContinueInspection = ramdisk.RuleContinueInspection

// ContinueInspectionPath is public, as in Ironic's public_api_routes.
const ContinueInspectionPath = "/v1/continue_inspection"

func (a *API) registerInspection(v1 fiber.Router) {
	v1.Post("/continue_inspection", a.agentSource(ruleContinueInspection), query("node_uuid", "agent_token"), a.continueInspection)
}

// inspectionData is the part of the ramdisk's data Ironic's
// DATA_VALIDATOR checks; the rest is plugin data and may hold anything.
type inspectionData struct {
	Inventory *struct {
		BMCAddress   *string `json:"bmc_address"`
		BMCv6Address *string `json:"bmc_v6address"`
		Interfaces   []struct {
			MACAddress *string `json:"mac_address"`
		} `json:"interfaces"`
	} `json:"inventory"`
}

// continueInspection is Ironic's ramdisk callback, checked as Ironic
// checks it: the agent booted by the agent inspect interface posts its
// inventory here, and the node it finds (which must be in inspect wait)
// keeps it for the conductor, which finishes the inspection. Unlike
// Ironic, the node is the one whose agent token the request carries
// (agent_token, which the boot medium put in the agent's callback URL);
// matching by MAC or BMC address without it takes --inspection-discovery.
// Anvil enrols no unknown machine: an unknown node, an ambiguous one, a
// wrong or missing token and a node not awaiting inspection all end in
// the same generic 404, which tells the caller nothing about which.
func (a *API) continueInspection(c *fiber.Ctx) error {
	v := ver(c)
	node := c.Query("node_uuid")
	// Ironic also takes 1.1, as a drop-in for Inspector's API.
	if (v != VerMin && v < VerInspectCallback) || (node != "" && v < VerInspectCallback) {
		return errs.NotFound("API version %s or newer is required", VerInspectCallback)
	}
	if err := a.Guard.Authorize(c.UserContext(), ruleContinueInspection, "node", "", policies.Target{}); err != nil {
		return err
	}
	if node != "" && !nodes.IsUUID(node) {
		return errs.BadRequest("node_uuid", "Expected a UUID for node_uuid: %s", node)
	}
	var d inspectionData
	var whole map[string]any
	// Unlike bind, unknown keys are the ramdisk's plugin data.
	if err := json.Unmarshal(c.Body(), &d); err != nil {
		return errs.BadRequest("inventory", "Invalid inspection data: %v", err)
	}
	if err := json.Unmarshal(c.Body(), &whole); err != nil {
		return errs.BadRequest("inventory", "Invalid inspection data: %v", err)
	}
	if d.Inventory == nil {
		return errs.BadRequest("inventory", "'inventory' is a required property")
	}
	if len(d.Inventory.Interfaces) == 0 {
		return errs.BadRequest("inventory", "inventory.interfaces must list at least one interface")
	}
	lookup := node != ""
	in := ramdisk.Inspection{NodeUUID: node, Token: c.Query("agent_token")}
	for i, x := range d.Inventory.Interfaces {
		if x.MACAddress == nil {
			return errs.BadRequest("inventory", "inventory.interfaces[%d] needs a mac_address", i)
		}
		in.MACs = append(in.MACs, *x.MACAddress)
		// Ironic drops what is not a MAC rather than refusing it.
		if _, err := ports.NormalizeMAC("mac_address", *x.MACAddress); err == nil {
			lookup = true
		}
	}
	for _, b := range []*string{d.Inventory.BMCAddress, d.Inventory.BMCv6Address} {
		if b != nil && *b != "" {
			lookup = true
			in.BMC = append(in.BMC, *b)
		}
	}
	if !lookup {
		return errs.BadRequest("inventory", "No lookup information provided: the inventory has no valid MAC address and no BMC address")
	}
	in.Inventory, _ = whole["inventory"].(map[string]any)
	delete(whole, "inventory")
	in.PluginData = whole
	uuid, err := a.Ramdisk.ContinueInspection(c.UserContext(), in)
	if err != nil {
		return err
	}
	// Ironic answers 202 with the node's UUID, which the agent then
	// looks its node up by; a caller without the token gets none (the
	// agent then looks up by MAC).
	if uuid == "" {
		return c.Status(fiber.StatusAccepted).JSON(fiber.Map{})
	}
	return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"uuid": uuid})
}
