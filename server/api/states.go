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
	"github.com/anvilproject/anvil/server/nodes"
)

func (a *API) registerStates(v1 fiber.Router) {
	v1.Get("/nodes/:node/states", query(), a.getStates)
	v1.Put("/nodes/:node/states/power", a.setPower)
	v1.Put("/nodes/:node/states/provision", a.setProvision)
	v1.Put("/nodes/:node/states/raid", a.setRAID)
	v1.Get("/nodes/:node/management/boot_device", query(), a.getBootDevice)
	v1.Put("/nodes/:node/management/boot_device", a.setBootDevice)
	v1.Get("/nodes/:node/steps", query(), a.listSteps)
	v1.Get("/conductors", since(VerConductor, "conductors"), query("detail", "fields"), a.listConductors)
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
	}
	_ = json.Unmarshal(c.Body(), &shape)
	target, _ := shape.Target.(string)
	hasSteps := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" && string(raw) != "[]" }
	rules := cond.ProvisionRules(target, shape.Runbook != nil && shape.Runbook != "", hasSteps(shape.CleanSteps) || hasSteps(shape.ServiceSteps))
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
	case ver(c) < offered(verbSince[in.Target]):
		return errs.NotAcceptable("%s requires API version %s or later", in.Target, offered(verbSince[in.Target]))
	case in.DisableRamdisk != nil && ver(c) < VerDisableRamdisk:
		return errs.NotAcceptable("disable_ramdisk requires API version %s or later", VerDisableRamdisk)
	case in.DisableRamdisk != nil && in.Target == "service" && ver(c) < offered(VerServiceRamdisk):
		return errs.NotAcceptable("disable_ramdisk for servicing requires API version %s or later", offered(VerServiceRamdisk))
	case in.Runbook != "" && ver(c) < offered(VerRunbooks):
		return errs.NotAcceptable("runbooks require API version %s or later", offered(VerRunbooks))
	}
	r := cond.ProvisionRequest{Target: in.Target, Runbook: in.Runbook, CleanSteps: in.CleanSteps, ServiceSteps: in.ServiceSteps,
		DeploySteps: in.DeploySteps, ConfigDrive: in.ConfigDrive, DeployAbort: ver(c) >= VerDeployAbort}
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
	steps := cond.StepsFor(n.Driver)
	for i := range steps {
		if steps[i].Args == nil {
			steps[i].Args = []cond.Arg{}
		}
	}
	return c.JSON(fiber.Map{"driver": n.Driver, "steps": steps})
}

func (a *API) listConductors(c *fiber.Ctx) error {
	if err := a.Guard.Authorize(c.UserContext(), cond.RuleConductorGet, "conductor", "", policies.Target{}); err != nil {
		return err
	}
	cs, err := a.Ops.C.List(c.UserContext())
	if err != nil {
		return err
	}
	detail := false
	if d := c.Query("detail"); d != "" {
		if detail, err = strconv.ParseBool(d); err != nil {
			return errs.BadRequest("detail", "detail must be true or false, not %q", d)
		}
	}
	// node_count is Anvil's: how many nodes the hash ring maps to the
	// conductor now, so an operator sees the work spread. It is in every
	// list unless ?fields= leaves it out.
	var fields []string
	switch raw := c.Query("fields"); {
	case raw != "" && detail:
		return errs.BadRequest("fields", "Can not specify ?detail=True and fields in the same request.")
	case raw != "":
		fields = strings.Split(raw, ",")
	case !detail:
		fields = append(slices.Clone(conductorListDefaults), "node_count")
	}
	out := make([]fiber.Map, len(cs))
	for i, x := range cs {
		out[i] = conductorJSON(c, x)
		out[i]["node_count"] = x.Nodes
		if fields == nil {
			continue
		}
		if err := keepFields(out[i], fields); err != nil {
			return err
		}
	}
	return c.JSON(fiber.Map{"conductors": out})
}

// conductorListDefaults are what a conductor list shows without ?detail=
// or ?fields=: Ironic's DEFAULT_RETURN_FIELDS, besides links.
var conductorListDefaults = []string{"hostname", "conductor_group", "alive"}

// keepFields keeps fields (and links) of out, refusing a field out does
// not have.
func keepFields(out fiber.Map, fields []string) error {
	keep := map[string]bool{"links": true}
	var invalid []string
	for _, f := range fields {
		f = strings.TrimSpace(f)
		if _, ok := out[f]; !ok {
			invalid = append(invalid, f)
		}
		keep[f] = true
	}
	if len(invalid) > 0 {
		return errs.BadRequest("fields", "Field(s) %q are not valid", strings.Join(invalid, ", "))
	}
	for k := range out {
		if !keep[k] {
			delete(out, k)
		}
	}
	return nil
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
	out := conductorJSON(c, x)
	if raw := c.Query("fields"); raw != "" {
		if err := keepFields(out, strings.Split(raw, ",")); err != nil {
			return err
		}
	}
	return c.JSON(out)
}

// supportedBootDevices lists the boot devices the node's driver can set,
// from Anvil's table rather than the BMC: the list is what a set would
// accept.
func (a *API) supportedBootDevices(c *fiber.Ctx) error {
	n, err := a.Nodes.Authorized(c.UserContext(), c.Params("node"), cond.RuleGetBootDevice)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"supported_boot_devices": bmc.BootDevices(n.Driver)})
}
