package api

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
)

// registerHardware mounts what Anvil reads from and does to a node's
// hardware through its BMC.
func (a *API) registerHardware(v1 fiber.Router) {
	// Ironic's node lookup refuses bios below 1.40 before any method:
	// 404 to a GET, a PUT or anything else.
	v1.Use("/nodes/:node/bios", subSince(VerBIOSIface, "BIOS settings"))
	v1.Get("/nodes/:node/bios", query("detail", "fields"), a.listBIOS)
	v1.Get("/nodes/:node/bios/:setting", query(), a.getBIOS)
	v1.Use("/nodes/:node/inventory", subSince(VerInventory, "node inventory"))
	v1.Get("/nodes/:node/inventory", query(), a.getInventory)
}

// biosRegistryFields are Ironic's attribute-registry fields (1.74):
// Anvil reads no registry from the BMC, so they are null.
var biosRegistryFields = []string{"attribute_type", "allowable_values", "lower_bound", "max_length", "min_length", "read_only", "reset_required", "unique", "upper_bound"}

func biosJSON(c *fiber.Ctx, s *ent.BiosSetting, registry bool) fiber.Map {
	var updated any
	if s.UpdatedAt != nil {
		updated = s.UpdatedAt.UTC().Format(time.RFC3339Nano)
	}
	path := "/nodes/" + c.Params("node") + "/bios/" + s.Name
	m := fiber.Map{"name": s.Name, "value": s.Value, "created_at": s.CreatedAt.UTC().Format(time.RFC3339Nano), "updated_at": updated,
		"links": []fiber.Map{link(baseURL(c)+"/v1"+path, "self"), link(baseURL(c)+path, "bookmark")}}
	if registry {
		for _, f := range biosRegistryFields {
			m[f] = nil
		}
	}
	return m
}

// listBIOS serves GET /v1/nodes/{node}/bios: the cached settings.
// detail and fields came with 1.74.
func (a *API) listBIOS(c *fiber.Ctx) error {
	if ver(c) < VerBIOSRegistry && (c.Query("detail") != "" || c.Query("fields") != "") {
		return requireVersion(ver(c), VerBIOSRegistry, "detail and fields on BIOS settings")
	}
	detail := false
	if d := c.Query("detail"); d != "" {
		var err error
		if detail, err = strconv.ParseBool(d); err != nil {
			return errs.BadRequest("detail", "detail must be true or false, got %q", d)
		}
	}
	var fields []string
	if raw := c.Query("fields"); raw != "" {
		if detail {
			return errs.BadRequest("fields", "Can not specify ?detail=True and fields in the same request.")
		}
		known := append([]string{"name", "value", "created_at", "updated_at"}, biosRegistryFields...)
		for f := range strings.SplitSeq(raw, ",") {
			if f = strings.TrimSpace(f); !slices.Contains(known, f) {
				return errs.BadRequest("fields", "Field(s) %q are not valid", f)
			}
			fields = append(fields, f)
		}
	}
	settings, err := a.Ops.BIOS(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(settings))
	for i, s := range settings {
		out[i] = only(biosJSON(c, s, detail || fields != nil), fields)
	}
	return c.JSON(fiber.Map{"bios": out})
}

// getBIOS serves GET /v1/nodes/{node}/bios/{setting}, keyed by the
// setting's name as Ironic answers.
func (a *API) getBIOS(c *fiber.Ctx) error {
	s, err := a.Ops.BIOSSetting(c.UserContext(), c.Params("node"), c.Params("setting"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{s.Name: biosJSON(c, s, ver(c) >= VerBIOSRegistry)})
}

// getInventory serves GET /v1/nodes/{node}/inventory: what the last
// inspection found.
func (a *API) getInventory(c *fiber.Ctx) error {
	inv, err := a.Ops.Inventory(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"inventory": inv.Inventory, "plugin_data": inv.PluginData})
}
