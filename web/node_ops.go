package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// ruleUpdateDriverInfo is the rule a driver_info patch needs (nodes'
// fieldRules).
const ruleUpdateDriverInfo = "baremetal:node:update:driver_info"

// bmcFields are the BMC settings each driver's forms offer, as
// driver_info keys; a driver not listed has none.
var bmcFields = map[string][]views.BMCField{
	"redfish": {
		{Name: "redfish_address", Label: "Redfish address", Help: "The BMC's URL, such as https://10.0.0.5 or https://bmc.example:8443."},
		{Name: "redfish_system_id", Label: "System", Help: "The system's path, such as /redfish/v1/Systems/1; empty when the BMC has one system."},
		{Name: "redfish_username", Label: "User name"},
		{Name: "redfish_password", Label: "Password", Secret: true},
		{Name: "redfish_verify_ca", Label: "Verify the certificate", Help: "true (the default when empty), false, or a PEM CA bundle.", Multiline: true},
	},
	"ipmi": {
		{Name: "ipmi_address", Label: "IPMI address", Help: "The BMC's host name or IP address."},
		{Name: "ipmi_port", Label: "Port", Help: "UDP port; empty for 623."},
		{Name: "ipmi_username", Label: "User name"},
		{Name: "ipmi_password", Label: "Password", Secret: true},
	},
	"bmclib": bmclibFields(),
}

// bmclibFields are the bmclib driver's fields: the provider, then what
// each provider needs (rpc a webhook and its secret; the others a BMC to
// log in to), each marked with the providers that use it.
func bmclibFields() []views.BMCField {
	var bmcs []string
	for _, p := range bmc.BmclibProviders() {
		if p != "rpc" {
			bmcs = append(bmcs, p)
		}
	}
	rpc := []string{"rpc"}
	return []views.BMCField{
		{Name: "bmclib_provider", Label: "Provider", Choices: bmc.BmclibProviders(),
			Help: "The one bmclib provider that drives the machine (bmclib never tries another): rpc for a signed webhook (PDUs, lab power controllers), intelamt for Intel AMT, ipmitool or redfish for those BMCs, dell, supermicro, asrockrack or openbmc for those vendors' BMCs, homeassistant for a Home Assistant switch. Only the fields it uses are saved."},
		{Name: "bmclib_rpc_url", Label: "Webhook URL (rpc)", Help: "The http(s) URL every request is POSTed to, signed with HMAC-SHA256.", Providers: rpc},
		{Name: "bmclib_rpc_secret", Label: "Webhook secret (rpc)", Secret: true, Providers: rpc},
		// rpc tells its webhook which machine by it: a form without it
		// would drop the name from an rpc node at its next save.
		{Name: "bmclib_address", Label: "BMC address (rpc: the machine's name)", Help: "The BMC's host name or IP address; for rpc, optional, the machine's name the webhook is told."},
		{Name: "bmclib_port", Label: "Port (every provider but rpc)", Help: "Empty for the provider's own: 623 ipmitool, 16992 intelamt, 8123 homeassistant, 443 otherwise.", Providers: bmcs},
		{Name: "bmclib_username", Label: "User name (every provider but rpc)", Providers: bmcs},
		{Name: "bmclib_password", Label: "Password (every provider but rpc; homeassistant: its access token)", Secret: true, Providers: bmcs},
		// rpc's https webhook is verified with it too.
		{Name: "bmclib_verify_ca", Label: "Verify the certificate", Help: "true (the default when empty), false, or a PEM CA bundle; for rpc, the https webhook's.", Multiline: true},
		{Name: "bmclib_system_name", Label: "System name (redfish)", Help: "The Name of the system to drive; needed only when the BMC has more than one.", Providers: []string{"redfish"}},
		{Name: "bmclib_homeassistant_switch", Label: "Switch entity (homeassistant)", Help: "The switch that powers the machine, such as switch.rack1_node7.", Providers: []string{"homeassistant"}},
	}
}

// usedBy says whether field f is one provider uses: a bmclib field only
// for the providers marked, so what was typed for another is never saved.
func usedBy(f views.BMCField, provider string) bool {
	return f.Providers == nil || slices.Contains(f.Providers, provider)
}

// lifecycle are the provision verbs the operator section offers, by the
// states they lead on from (a failed clean's way back is Recovery's).
var lifecycle = []struct {
	verb, label string
	from        []string
}{
	{"manage", "Manage (check the BMC)", []string{nodes.StateEnroll, nodes.StateAvailable, conductor.StateInspectFailed}},
	{"inspect", "Inspect", []string{nodes.StateManageable, conductor.StateInspectFailed}},
	{"provide", "Provide (make available)", []string{nodes.StateManageable}},
}

// operator fills the operator section: every control, and the rule that
// refuses it to the viewer.
func (p *Portal) operator(ctx context.Context, d *views.NodeDetail, v *nodes.View) {
	t := nodes.Target(v.Node)
	o := &d.Ops
	o.Maintenance, o.Traits, o.Retired, o.RetiredReason = v.Maintenance, v.Traits, v.Retired, deref(v.RetiredReason)
	why := func(rule, what string) string {
		if p.Guard.Allowed(ctx, rule, t) {
			return ""
		}
		return p.denied(ctx, what, rule)
	}
	if o.Maintenance {
		o.MaintenanceWhy = why(nodes.RuleClearMaintenance, "may not end maintenance")
	} else {
		o.MaintenanceWhy = why(nodes.RuleSetMaintenance, "may not put the node in maintenance")
	}
	o.LifecycleWhy = why(conductor.RuleProvision, "may not manage, inspect or provide the node")
	for _, l := range lifecycle {
		for _, s := range l.from {
			if s == v.ProvisionState {
				o.Lifecycle = append(o.Lifecycle, views.Action{Verb: l.verb, Label: l.label})
			}
		}
	}
	o.AddTraitWhy = why(nodes.RuleTraitsSet, "may not add traits")
	o.RemoveTraitWhy = why(nodes.RuleTraitsDelete, "may not remove traits")
	o.RetireWhy = why(nodes.RuleUpdateRetired, "may not retire or unretire the node")
	if !p.Guard.Allowed(ctx, nodes.RuleDeleteSelfOwned, t) {
		o.DeleteWhy = why(nodes.RuleDelete, "may not delete the node")
	}
	o.BMCWhy = why(ruleUpdateDriverInfo, "may not change the BMC settings")
	o.TestWhy = why(conductor.RuleValidate, "may not test the BMC connection")
	// Stored values are shown only to those who may read driver_info;
	// the view has them redacted otherwise, and secrets always masked.
	readable := p.Guard.Allowed(ctx, nodes.RuleGetDriverInfo, t)
	if !readable && o.BMCWhy == "" {
		// Nobody edits settings they cannot see.
		o.BMCWhy = p.denied(ctx, "may not read the BMC settings", nodes.RuleGetDriverInfo)
	}
	for _, f := range bmcFields[bmc.Canonical(v.Driver)] {
		switch {
		case f.Secret:
			s, _ := v.DriverInfo[f.Name].(string)
			f.Set = s != ""
		case readable && v.DriverInfo[f.Name] != nil:
			f.Value = fmt.Sprint(v.DriverInfo[f.Name])
		}
		o.BMC = append(o.BMC, f)
	}
}

// opRefused shows a service's refusal in the operator section, next to
// field (the one the error names, when it names one).
func (p *Portal) opRefused(c *fiber.Ctx, err error, field string) error {
	st := errs.Status(err)
	if st >= 500 || st == 404 {
		return p.fail(c, err)
	}
	// The BMC form has a field for each driver_info key the service
	// may name; the other forms one field each.
	var e *errs.Error
	if errors.As(err, &e) && field == "driver_info" && formHas(strings.TrimPrefix(e.Field, "driver_info/")) {
		field = strings.TrimPrefix(e.Field, "driver_info/")
	}
	if st != 400 {
		field = ""
	}
	return p.fullNodePage(c, st, "", func(d *views.NodeDetail) { d.Ops.Field, d.Ops.Problem = field, err.Error() })
}

// formHas reports whether a BMC form has a field named key.
func formHas(key string) bool {
	for _, fs := range bmcFields {
		for _, f := range fs {
			if f.Name == key {
				return true
			}
		}
	}
	return false
}

// opDone shows the node page with the operator section open, saying
// what was done.
func (p *Portal) opDone(c *fiber.Ctx, uuid, msg string) error {
	return p.flashTo(c, "/nodes/"+uuid+"?ops=1", msg)
}

// opNode finds the node an operator form is about (404 when the viewer
// may not see it); the service checks the action's own rule.
func (p *Portal) opNode(c *fiber.Ctx) (*nodes.View, string, error) {
	v, err := p.Nodes.Get(c.UserContext(), c.Params("id"))
	if err != nil {
		return nil, "", err
	}
	return v, nameOr(deref(v.Name), v.UUID), nil
}

func (p *Portal) nodeMaintenance(c *fiber.Ctx) error {
	v, label, err := p.opNode(c)
	if err != nil {
		return p.fail(c, err)
	}
	on := c.FormValue("on") == "yes"
	reason := strings.TrimSpace(c.FormValue("reason"))
	if err := p.Nodes.SetMaintenance(c.UserContext(), v.UUID, on, reason); err != nil {
		return p.opRefused(c, err, "reason")
	}
	if on {
		return p.opDone(c, v.UUID, label+" is in maintenance; Anvil leaves it alone until maintenance ends.")
	}
	return p.opDone(c, v.UUID, "Maintenance of "+label+" ended.")
}

func (p *Portal) nodeLifecycle(c *fiber.Ctx) error {
	v, label, err := p.opNode(c)
	if err != nil {
		return p.fail(c, err)
	}
	target := c.FormValue("target")
	known := false
	for _, l := range lifecycle {
		known = known || l.verb == target
	}
	if !known {
		return p.opRefused(c, errs.BadRequest("target", "target: choose manage, inspect or provide"), "")
	}
	if err := p.Ops.Provision(c.UserContext(), v.UUID, conductor.ProvisionRequest{Target: target}); err != nil {
		return p.opRefused(c, err, "")
	}
	return p.opDone(c, v.UUID, strings.ToUpper(target[:1])+target[1:]+" started on "+label+"; the status below follows it.")
}

func (p *Portal) nodeTraits(c *fiber.Ctx) error {
	v, label, err := p.opNode(c)
	if err != nil {
		return p.fail(c, err)
	}
	ctx := c.UserContext()
	add, remove := strings.TrimSpace(c.FormValue("add")), c.FormValue("remove")
	switch {
	case add != "":
		err = p.Nodes.AddTrait(ctx, v.UUID, add)
	case remove != "":
		err = p.Nodes.RemoveTrait(ctx, v.UUID, remove)
	default:
		// An empty name would remove every trait (the service's "all").
		err = errs.BadRequest("trait", "trait: type the trait to add")
	}
	if err != nil {
		return p.opRefused(c, err, "trait")
	}
	if add != "" {
		return p.opDone(c, v.UUID, "Trait "+add+" added to "+label+".")
	}
	return p.opDone(c, v.UUID, "Trait "+remove+" removed from "+label+".")
}

func (p *Portal) nodeRetire(c *fiber.Ctx) error {
	v, label, err := p.opNode(c)
	if err != nil {
		return p.fail(c, err)
	}
	retire := c.FormValue("retired") == "yes"
	ops := []map[string]any{{"op": "replace", "path": "/retired", "value": retire}}
	if reason := strings.TrimSpace(c.FormValue("reason")); retire && reason != "" {
		ops = append(ops, map[string]any{"op": "replace", "path": "/retired_reason", "value": reason})
	}
	raw, _ := json.Marshal(ops)
	if _, err := p.Nodes.Patch(c.UserContext(), v.UUID, raw, nil); err != nil {
		return p.opRefused(c, err, "retired_reason")
	}
	if retire {
		return p.opDone(c, v.UUID, label+" is retired: it will not be provided again.")
	}
	return p.opDone(c, v.UUID, label+" is no longer retired.")
}

// nodeDelete asks first, then deletes through the service, which decides
// the rule (its own project's node or any) and the states that allow it.
func (p *Portal) nodeDelete(c *fiber.Ctx) error {
	v, label, err := p.opNode(c)
	if err != nil {
		return p.fail(c, err)
	}
	if c.FormValue("confirmed") != "yes" {
		q := "Delete " + label + "? Its ports, traits and history go with it; this cannot be undone."
		return p.fullNodePage(c, 200, "", func(d *views.NodeDetail) { d.Ops.ConfirmDelete = q })
	}
	if err := p.Nodes.Delete(c.UserContext(), v.UUID); err != nil {
		return p.opRefused(c, err, "")
	}
	return p.flashTo(c, "/nodes", "Node "+label+" deleted.")
}

// driverInfoForm reads a driver's BMC fields from a form: an empty field
// is not given, a bmclib field the chosen provider does not use is not
// either, and true or false in a verify_ca field is the Boolean.
func driverInfoForm(c *fiber.Ctx, driver string) map[string]any {
	info := map[string]any{}
	provider := strings.TrimSpace(c.FormValue("bmclib_provider"))
	for _, f := range bmcFields[bmc.Canonical(driver)] {
		if !usedBy(f, provider) {
			continue
		}
		val := c.FormValue(f.Name)
		if !f.Secret {
			// A browser sends a text area's lines ended by CRLF.
			val = strings.TrimSpace(strings.ReplaceAll(val, "\r\n", "\n"))
		}
		if val == "" {
			continue
		}
		if b, err := strconv.ParseBool(val); err == nil && strings.HasSuffix(f.Name, "_verify_ca") {
			info[f.Name] = b
			continue
		}
		info[f.Name] = val
	}
	return info
}

// nodeBMC changes a node's BMC settings through the same driver_info
// patch the API applies: a field emptied is removed, a password left
// empty is kept (unless the bmclib provider chosen does not use it), and
// the service refuses an address change without the password (a 400
// shown next to the field).
func (p *Portal) nodeBMC(c *fiber.Ctx) error {
	v, label, err := p.opNode(c)
	if err != nil {
		return p.fail(c, err)
	}
	info := driverInfoForm(c, v.Driver)
	provider := strings.TrimSpace(c.FormValue("bmclib_provider"))
	var ops []map[string]any
	for _, f := range bmcFields[bmc.Canonical(v.Driver)] {
		val, given := info[f.Name]
		cur, stored := v.DriverInfo[f.Name]
		switch {
		case given && stored && !f.Secret && strings.TrimSpace(fmt.Sprint(cur)) == fmt.Sprint(val):
			// Unchanged: patching it anyway could ask for the password.
		case given:
			ops = append(ops, map[string]any{"op": "add", "path": "/driver_info/" + f.Name, "value": val})
		case stored && (!f.Secret || !usedBy(f, provider)):
			// A secret no longer used is not kept where nobody sees it.
			ops = append(ops, map[string]any{"op": "remove", "path": "/driver_info/" + f.Name})
		}
	}
	if len(ops) == 0 {
		return p.opDone(c, v.UUID, "Nothing changed in the BMC settings of "+label+".")
	}
	raw, _ := json.Marshal(ops)
	if _, err := p.Nodes.Patch(c.UserContext(), v.UUID, raw, nil); err != nil {
		return p.opRefused(c, err, "driver_info")
	}
	return p.opDone(c, v.UUID, "BMC settings of "+label+" saved. Use “Test connection” to check them.")
}

// nodeTestBMC asks the node's BMC for its power state through the
// conductor and says what came of it in plain words.
func (p *Portal) nodeTestBMC(c *fiber.Ctx) error {
	v, _, err := p.opNode(c)
	if err != nil {
		return p.fail(c, err)
	}
	state, err := p.Ops.CheckBMC(c.UserContext(), v.UUID)
	var said string
	switch {
	case err == nil:
		said = "The BMC answered: the node is " + powerWords(state) + ". Anvil can reach it and log in."
	case errs.Status(err) == 403:
		return p.opRefused(c, err, "")
	case errs.Status(err) == 400:
		said = "The BMC settings are incomplete or wrong: " + err.Error()
	case errs.Status(err) == 503:
		s, advice := plainError(err.Error())
		said = s + " " + advice
	default:
		return p.fail(c, err)
	}
	return p.fullNodePage(c, 200, "", func(d *views.NodeDetail) { d.Ops.Tested, d.Ops.TestFailed = said, err != nil })
}

func powerWords(state string) string {
	switch state {
	case bmc.PowerOn:
		return "powered on"
	case bmc.PowerOff:
		return "powered off"
	}
	return "in power state " + state
}
