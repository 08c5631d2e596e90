package api

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	cond "github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/listing"
	"github.com/anvilproject/anvil/server/nodes"
)

func (a *API) registerStates(v1 fiber.Router) {
	v1.Get("/nodes/:node/states", query(), a.getStates)
	v1.Put("/nodes/:node/states/power", a.setPower)
	v1.Put("/nodes/:node/states/provision", a.setProvision)
	v1.Put("/nodes/:node/states/raid", a.setRAID)
	v1.Post("/nodes/:node/recover", a.recoverNode)
	v1.Get("/nodes/:node/management/boot_device", query(), a.getBootDevice)
	v1.Put("/nodes/:node/management/boot_device", a.setBootDevice)
	v1.Get("/nodes/:node/steps", query(), a.listSteps)
	v1.Get("/conductors", since(VerConductor, "conductors"), query(resListQuery...), a.listConductors)
	v1.Get("/conductors/:hostname", since(VerConductor, "conductors"), query("fields"), a.getConductor)
	v1.Get("/nodes/:node/management/boot_device/supported", query(), a.supportedBootDevices)
}

func (a *API) getStates(c *fiber.Ctx) error {
	n, err := a.Nodes.Authorized(c.UserContext(), c.Params("node"), cond.RuleGetStates)
	if err != nil {
		return err
	}
	v, err := a.Nodes.Get(c.UserContext(), n.UUID)
	if err != nil {
		return err
	}
	vr := ver(c)
	out := fiber.Map{
		"power_state": v.PowerState, "target_power_state": v.TargetPowerState,
		"provision_state": legacyProvisionState(v.ProvisionState, vr), "target_provision_state": v.TargetProvisionState,
		"provision_updated_at": v.ProvisionUpdatedAt, "last_error": v.LastError,
		"console_enabled": v.ConsoleEnabled,
	}
	// Ironic's node_states_convert adds the RAID fields from 1.12 and the
	// boot mode from 1.75.
	if vr >= VerRAID {
		out["raid_config"], out["target_raid_config"] = orEmpty(v.RaidConfig), orEmpty(v.TargetRaidConfig)
	}
	if vr >= VerBootMode {
		out["boot_mode"], out["secure_boot"] = v.BootMode, v.SecureBoot
	}
	return c.JSON(out)
}

// setRAID sets the node's target RAID configuration; the body is the
// configuration itself, {"logical_disks": [...]}, or {} to clear it.
func (a *API) setRAID(c *fiber.Ctx) error {
	if err := requireVersion(ver(c), VerRAID, "RAID configuration"); err != nil {
		return err
	}
	if err := a.authorizeFirst(c, nodes.RuleSetRAIDState); err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(c.Body(), &cfg); err != nil || cfg == nil {
		return errs.BadRequest("raid_config", "the body must be a RAID configuration object such as {\"logical_disks\": [...]}")
	}
	if err := a.Nodes.SetTargetRAID(c.UserContext(), c.Params("node"), cfg); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// recoverNode is Anvil's tenant recovery of a failed runbook run (an
// Anvil extension, at every version): retry and return answer 202 as a
// provision change does, notify 204.
func (a *API) recoverNode(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleRecover); err != nil {
		return err
	}
	var in struct {
		Action string `json:"action"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if err := a.Ops.Recover(c.UserContext(), c.Params("node"), in.Action); err != nil {
		return err
	}
	if in.Action == cond.RecoverNotify {
		return c.SendStatus(204)
	}
	c.Set("Location", baseURL(c)+"/v1/nodes/"+c.Params("node")+"/states")
	return c.SendStatus(202)
}

// authorizeFirst resolves the node and checks rules before the handler
// reads the body: a caller who may not see the node gets 404 and one who
// may not act gets 403, whatever the body holds, so neither learns
// anything from validation messages.
func (a *API) authorizeFirst(c *fiber.Ctx, rules ...string) error {
	_, err := a.Nodes.Authorized(c.UserContext(), c.Params("node"), rules...)
	return err
}

func (a *API) setPower(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleSetPower); err != nil {
		return err
	}
	var in struct {
		Target  string `json:"target"`
		Timeout *int   `json:"timeout"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if in.Timeout != nil && (*in.Timeout < 1 || *in.Timeout > 3600) {
		return errs.BadRequest("timeout", "timeout must be 1 to 3600 seconds")
	}
	if (in.Target == "soft power off" || in.Target == "soft rebooting") && ver(c) < VerSoftPower {
		return errs.NotAcceptable("%s requires API version %s or later", in.Target, VerSoftPower)
	}
	var timeout time.Duration
	if in.Timeout != nil {
		timeout = time.Duration(*in.Timeout) * time.Second
	}
	if err := a.Ops.SetPowerWithin(c.UserContext(), c.Params("node"), in.Target, timeout); err != nil {
		return err
	}
	c.Set("Location", baseURL(c)+"/v1/nodes/"+c.Params("node")+"/states")
	return c.SendStatus(202)
}

func (a *API) setProvision(c *fiber.Ctx) error {
	// The rules depend on the request's shape; a lenient look at it picks
	// them before the strict decode can refuse anything.
	var shape struct {
		Target       any             `json:"target"`
		Runbook      any             `json:"runbook"`
		CleanSteps   json.RawMessage `json:"clean_steps"`
		ServiceSteps json.RawMessage `json:"service_steps"`
		DeploySteps  json.RawMessage `json:"deploy_steps"`
	}
	_ = json.Unmarshal(c.Body(), &shape)
	target, _ := shape.Target.(string)
	hasSteps := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" && string(raw) != "[]" }
	rules := cond.ProvisionRules(target, shape.Runbook != nil && shape.Runbook != "", hasSteps(shape.CleanSteps) || hasSteps(shape.ServiceSteps), hasSteps(shape.DeploySteps))
	if err := a.authorizeFirst(c, rules...); err != nil {
		return err
	}
	var in struct {
		Target         string            `json:"target"`
		Runbook        string            `json:"runbook"`
		CleanSteps     []cond.Step       `json:"clean_steps"`
		ServiceSteps   []cond.Step       `json:"service_steps"`
		DeploySteps    []cond.DeployStep `json:"deploy_steps"`
		DisableRamdisk *bool             `json:"disable_ramdisk"`
		ConfigDrive    any               `json:"configdrive"`
		RescuePassword *string           `json:"rescue_password"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if err := checkDeployRequest(ver(c), in.Target, in.ConfigDrive, in.DeploySteps); err != nil {
		return err
	}
	switch {
	case in.RescuePassword != nil && ver(c) < VerRescueIface:
		return errs.NotAcceptable("rescue_password requires API version %s or later", VerRescueIface)
	case ver(c) < verbSince[in.Target]:
		return errs.NotAcceptable("%s requires API version %s or later", in.Target, verbSince[in.Target])
	case in.DisableRamdisk != nil && ver(c) < VerDisableRamdisk:
		return errs.NotAcceptable("disable_ramdisk requires API version %s or later", VerDisableRamdisk)
	case in.DisableRamdisk != nil && in.Target == "service" && ver(c) < VerServiceRamdisk:
		return errs.NotAcceptable("disable_ramdisk for servicing requires API version %s or later", VerServiceRamdisk)
	case in.Runbook != "" && ver(c) < VerRunbooks:
		return errs.NotAcceptable("runbooks require API version %s or later", VerRunbooks)
	}
	r := cond.ProvisionRequest{Target: in.Target, Runbook: in.Runbook, CleanSteps: in.CleanSteps, ServiceSteps: in.ServiceSteps,
		DeploySteps: in.DeploySteps, ConfigDrive: in.ConfigDrive, DeployAbort: ver(c) >= VerDeployAbort, InspectAbort: ver(c) >= VerInspectAbort}
	if in.DisableRamdisk != nil {
		r.DisableRamdisk = *in.DisableRamdisk
	}
	if in.RescuePassword != nil {
		r.RescuePassword = *in.RescuePassword
	}
	if err := a.Ops.Provision(c.UserContext(), c.Params("node"), r); err != nil {
		return err
	}
	c.Set("Location", baseURL(c)+"/v1/nodes/"+c.Params("node")+"/states")
	return c.SendStatus(202)
}

// verbSince is the version each provision verb appeared in: Ironic's
// MIN_VERB_VERSIONS, and unhold and service, which it checks apart.
var verbSince = map[string]Version{
	"manage": VerManageable, "provide": VerManageable, "abort": VerAbort, "clean": VerCleanSteps,
	"adopt": VerAdopt, "unhold": VerUnhold, "service": VerService, "rescue": VerRescueIface, "unrescue": VerRescueIface,
}

func (a *API) getBootDevice(c *fiber.Ctx) error {
	b, err := a.Ops.BootDevice(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	var dev *string
	if b.Device != "" {
		dev = &b.Device
	}
	return c.JSON(fiber.Map{"boot_device": dev, "persistent": b.Persistent})
}

func (a *API) setBootDevice(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleSetBootDevice); err != nil {
		return err
	}
	var in struct {
		BootDevice string `json:"boot_device"`
		Persistent bool   `json:"persistent"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if err := a.Ops.SetBootDevice(c.UserContext(), c.Params("node"), in.BootDevice, in.Persistent); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// listSteps shows the steps the node's driver runs, with their
// arguments: an Anvil extension (Ironic lists no steps per driver), for
// writing runbooks.
func (a *API) listSteps(c *fiber.Ctx) error {
	n, err := a.Nodes.Authorized(c.UserContext(), c.Params("node"), nodes.RuleGet)
	if err != nil {
		return err
	}
	steps := cond.StepsFor(n)
	for i := range steps {
		if steps[i].Args == nil {
			steps[i].Args = []cond.Arg{}
		}
	}
	return c.JSON(fiber.Map{"driver": n.Driver, "steps": steps})
}

// conductorFields are the fields ?fields= may name on a conductor, as
// Ironic's schema lists them; the list also offers Anvil's node_count.
var conductorFields = []string{"alive", "conductor_group", "created_at", "drivers", "hostname", "links", "updated_at"}

// conductorDefaults are the fields Ironic's list shows without ?detail.
var conductorDefaults = []string{"hostname", "conductor_group", "alive"}

// conductorFieldList parses ?fields=, naming every field not in allowed.
func conductorFieldList(raw string, allowed []string) ([]string, error) {
	var out, invalid []string
	for f := range strings.SplitSeq(raw, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(allowed, f) {
			invalid = append(invalid, f)
		}
		out = append(out, f)
	}
	if len(invalid) > 0 {
		return nil, errs.BadRequest("fields", "Field(s) %q are not valid", strings.Join(invalid, ", "))
	}
	return out, nil
}

// listConductors serves GET /v1/conductors as Ironic's: hostname,
// conductor_group and alive unless ?detail=true or ?fields=, paged by
// hostname markers in registration order unless sort_key says otherwise.
func (a *API) listConductors(c *fiber.Ctx) error {
	if err := a.Guard.Authorize(c.UserContext(), cond.RuleConductorGet, "conductor", "", policies.Target{}); err != nil {
		return err
	}
	o := listing.Options{Marker: c.Query("marker"), SortKey: c.Query("sort_key"), SortDir: c.Query("sort_dir")}
	if s := c.Query("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return errs.BadRequest("limit", "Limit must be positive, not %q", s)
		}
		o.Limit = n
	}
	detail := false
	if d := c.Query("detail"); d != "" {
		var err error
		if detail, err = strconv.ParseBool(d); err != nil {
			return errs.BadRequest("detail", "detail must be true or false, not %q", d)
		}
	}
	fields := conductorDefaults
	switch raw := c.Query("fields"); {
	case raw != "" && detail:
		return errs.BadRequest("fields", "Can not specify ?detail=True and fields in the same request.")
	case raw != "":
		var err error
		// node_count is Anvil's: how many nodes the hash ring maps to
		// the conductor now, so an operator sees the work spread.
		if fields, err = conductorFieldList(raw, append(slices.Clone(conductorFields), "node_count")); err != nil {
			return err
		}
	case detail:
		fields = nil
	}
	share := fields == nil || slices.Contains(fields, "node_count")
	cs, more, err := a.Ops.C.Page(c.UserContext(), o, share)
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(cs))
	for i, x := range cs {
		m := conductorJSON(c, x)
		if share {
			m["node_count"] = x.Nodes
		}
		out[i] = only(m, fields)
	}
	res := fiber.Map{"conductors": out}
	if more {
		res["next"] = nextURL(c, cs[len(cs)-1].Hostname)
	}
	return c.JSON(res)
}

func conductorJSON(c *fiber.Ctx, x cond.Info) fiber.Map {
	b := baseURL(c)
	drivers := make([]string, 0, len(x.Drivers))
	for _, d := range x.Drivers {
		if d = bmc.Canonical(d); !slices.Contains(drivers, d) {
			drivers = append(drivers, d)
		}
	}
	return fiber.Map{"hostname": x.Hostname, "conductor_group": x.Group, "alive": x.Alive, "drivers": drivers,
		"created_at": x.StartedAt.UTC().Format(time.RFC3339), "updated_at": x.HeartbeatAt.UTC().Format(time.RFC3339),
		"links": []fiber.Map{link(b+"/v1/conductors/"+x.Hostname, "self"), link(b+"/conductors/"+x.Hostname, "bookmark")}}
}

func (a *API) getConductor(c *fiber.Ctx) error {
	if err := a.Guard.Authorize(c.UserContext(), cond.RuleConductorGet, "conductor", c.Params("hostname"), policies.Target{}); err != nil {
		return err
	}
	x, err := a.Ops.C.Get(c.UserContext(), c.Params("hostname"))
	if err != nil {
		return err
	}
	var fields []string
	if raw := c.Query("fields"); raw != "" {
		if fields, err = conductorFieldList(raw, conductorFields); err != nil {
			return err
		}
	}
	return c.JSON(only(conductorJSON(c, x), fields))
}

// supportedBootDevices lists the boot devices the node's driver can set,
// from Anvil's table rather than the BMC: the list is what a set would
// accept.
func (a *API) supportedBootDevices(c *fiber.Ctx) error {
	n, err := a.Nodes.Authorized(c.UserContext(), c.Params("node"), cond.RuleGetBootDevice)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"supported_boot_devices": bmc.BootDevices(n.Driver, n.DriverInfo)})
}
