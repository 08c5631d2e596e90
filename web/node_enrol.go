package web

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ports"
	"github.com/anvilproject/anvil/views"
)

// enrolLabels name the enrol form's fields in its problem summary.
var enrolLabels = map[string]string{
	"name": "Name", "bmc_address": "BMC address", "bmc_username": "User name", "bmc_password": "Password",
	"boot_mac": "Boot MAC address", "console_interface": "Console", "resource_class": "Resource class",
	"owner": "Owner project", "lessee": "Lessee project",
}

// consoleWords say what each console interface is, for the choice.
var consoleWords = map[string]string{
	"no-console":     "None",
	"ipmitool-socat": "Serial console over IPMI (serial-over-LAN), in the browser",
	"fake":           "Fake console (for tests)",
}

// enrolment is one node to enrol, read from the form or a CSV row: what
// the service is given, the boot MAC, and every problem found first.
type enrolment struct {
	in       nodes.CreateInput
	addr     *bmc.Address
	extras   []views.BMCField
	mac      string
	problems []views.Problem
}

// problem adds a refusal of field.
func (e *enrolment) problem(field, msg string) {
	e.problems = append(e.problems, views.Problem{Field: field, Label: enrolLabels[field], Msg: msg})
}

// extrasFor are the driver's fields beyond what the address and the
// login give: the certificate check, and what a bmclib provider needs
// besides (rpc's machine name, redfish's system, Home Assistant's switch).
func extrasFor(a *bmc.Address) []views.BMCField {
	user, secret := a.LoginKeys()
	var out []views.BMCField
	for _, f := range bmcFields[a.Driver] {
		given := slices.Contains(bmc.AddressKeys(), f.Name) && !(a.Provider == "rpc" && f.Name == "bmclib_address")
		if given || f.Name == user || f.Name == secret || !usedBy(f, a.Provider) || strings.HasSuffix(f.Name, "_username") || strings.HasSuffix(f.Name, "_password") {
			continue
		}
		if a.Provider == "rpc" && f.Name == "bmclib_address" {
			f.Label, f.Help = "Machine name (told to the webhook)", "Optional: which machine the webhook acts on, when it serves several."
		}
		out = append(out, f)
	}
	return out
}

// readEnrolment reads one node from get (a form's or a CSV row's values)
// and checks everything that needs no database, gathering every problem
// rather than the first: the address, each driver_info key, the MAC, the
// console, name and projects.
func readEnrolment(get func(string) string) *enrolment {
	e := &enrolment{}
	val := func(k string) string { return strings.TrimSpace(get(k)) }
	if name := val("name"); name != "" {
		e.in.Name = &name
		if err := nodes.ValidateName("name", name); err != nil {
			e.problem("name", err.Error())
		}
	}
	a, err := bmc.ParseAddress(get("bmc_address"))
	if err != nil {
		e.problem("bmc_address", err.Error())
	} else {
		e.addr = a
		e.readDriver(get)
	}
	if mac := val("boot_mac"); mac != "" {
		if e.mac, err = ports.NormalizeMAC("boot_mac", mac); err != nil {
			e.problem("boot_mac", err.Error())
		}
	}
	e.in.Owner, e.in.Lessee = val("owner"), val("lessee")
	for _, f := range []string{"owner", "lessee"} {
		if err := nodes.ValidateProject(f, val(f)); err != nil {
			e.problem(f, err.Error())
		}
	}
	if rc := val("resource_class"); rc != "" {
		e.in.ResourceClass = &rc
		if len(rc) > 80 {
			e.problem("resource_class", "resource_class is longer than 80 characters")
		}
	}
	return e
}

// readDriver fills the driver and driver_info from the parsed address,
// the login and the driver's own fields, then finds every driver_info
// problem: validation names one key at a time, so each key it names is
// set aside and the rest checked again.
func (e *enrolment) readDriver(get func(string) string) {
	a := e.addr
	e.in.Driver = a.Driver
	info := maps.Clone(a.Info)
	user, secret := a.LoginKeys()
	if u := strings.TrimSpace(get("bmc_username")); u != "" && user != "" {
		info[user] = u
	}
	if s := get("bmc_password"); s != "" && secret != "" {
		info[secret] = s
	}
	e.extras = extrasFor(a)
	for i, f := range e.extras {
		v := strings.TrimSpace(strings.ReplaceAll(get(f.Name), "\r\n", "\n"))
		e.extras[i].Value = v
		if v == "" {
			continue
		}
		if b, err := strconv.ParseBool(v); err == nil && strings.HasSuffix(f.Name, "_verify_ca") {
			info[f.Name] = b
			continue
		}
		info[f.Name] = v
	}
	e.in.DriverInfo = info
	e.in.Interfaces = map[string]string{}
	if a.Boot != "" {
		e.in.Interfaces["boot"] = a.Boot
	}
	if c := strings.TrimSpace(get("console_interface")); c != "" {
		if err := bmc.CheckInterface(a.Driver, "console", c); err != nil {
			e.problem("console_interface", err.Error())
		} else {
			e.in.Interfaces["console"] = c
		}
	}
	rest := maps.Clone(info)
	for range len(info) + 1 {
		err := bmc.ValidateStored(a.Driver, rest)
		var fe *bmc.FieldError
		if err == nil || !errors.As(err, &fe) {
			break
		}
		key := strings.TrimPrefix(fe.Field, "driver_info/")
		field, said := e.fieldOf(key)
		e.problem(field, strings.ReplaceAll(fe.Msg, "driver_info/"+key, said))
		if _, ok := rest[key]; !ok {
			break // a required key missing: nothing else is learnt
		}
		delete(rest, key)
	}
}

// fieldOf names the form field a driver_info key came from, and how a
// sentence calls it.
func (e *enrolment) fieldOf(key string) (field, said string) {
	for _, f := range e.extras {
		if f.Name == key {
			return f.Name, strings.ToLower(f.Label[:1]) + f.Label[1:]
		}
	}
	switch user, secret := e.addr.LoginKeys(); key {
	case user:
		return "bmc_username", "the user name"
	case secret:
		if e.addr.Provider == "rpc" {
			return "bmc_password", "the webhook secret"
		}
		return "bmc_password", "the password"
	}
	return "bmc_address", "the BMC address"
}

// view is the form as typed, with the address's driver and its fields.
func (e *enrolment) view(c *fiber.Ctx) views.NewNode {
	n := views.NewNode{Name: strings.TrimSpace(c.FormValue("name")), Address: redacted(c.FormValue("bmc_address")),
		User: strings.TrimSpace(c.FormValue("bmc_username")), BootMAC: strings.TrimSpace(c.FormValue("boot_mac")),
		Console: c.FormValue("console_interface"), ResourceClass: strings.TrimSpace(c.FormValue("resource_class")),
		Owner: strings.TrimSpace(c.FormValue("owner")), Lessee: strings.TrimSpace(c.FormValue("lessee")),
		Problems: e.problems, Retype: c.FormValue("bmc_password") != ""}
	if a := e.addr; a != nil {
		n.Driver, n.DriverSaid, n.Extras = a.Driver, a.Driver, e.extras
		switch {
		case a.Provider != "":
			n.DriverSaid = "bmclib, provider " + a.Provider
		case a.Boot == "redfish-virtual-media":
			n.DriverSaid = "redfish, booting by virtual media"
		}
		ifc := bmc.Interfaces(a.Driver)
		for _, i := range ifc {
			if i.Type != "console" {
				continue
			}
			for _, impl := range i.Enabled {
				n.Consoles = append(n.Consoles, views.Action{Verb: impl, Label: nameOr(consoleWords[impl], impl)})
			}
			if n.Console == "" {
				n.Console = i.Default
			}
		}
	}
	return n
}

// canEnrol says whether the viewer may enrol nodes: any node, or (in a
// project) one its project owns.
func (p *Portal) canEnrol(ctx context.Context) bool {
	return p.mayEnrolFor(ctx, "")
}

// mayEnrolFor says whether the viewer may enrol a node owned by owner
// ("" for any), as nodes.Service.AuthorizeCreate decides, without
// recording a refusal (a dry run asks for each row).
func (p *Portal) mayEnrolFor(ctx context.Context, owner string) bool {
	if p.Guard.Allowed(ctx, nodes.RuleCreate, policies.Target{NodeOwner: owner}) {
		return true
	}
	pr := policies.PrincipalFrom(ctx)
	return pr != nil && !pr.System && (owner == "" || owner == pr.Project) &&
		p.Guard.Allowed(ctx, nodes.RuleCreateSelfOwned, policies.Target{NodeOwner: pr.Project})
}

// enrolWho says who may enrol, as the policy in force decides it, and
// what the viewer is: the reason beside the disabled control.
func (p *Portal) enrolWho(ctx context.Context) string {
	var who []string
	// The least system role that may enrol any node, then the least role
	// of a project (any: "p") that may enrol a node it owns.
	for _, s := range []struct{ project, rule, as string }{{"", nodes.RuleCreate, "system %ss"}, {"p", nodes.RuleCreateSelfOwned, "project %ss (nodes their project owns)"}} {
		for _, role := range []string{"member", "manager", "admin"} {
			pr := &policies.Principal{User: "someone", Project: s.project, System: s.project == "", Roles: policies.ExpandRoles([]string{role})}
			if p.Guard.Allowed(policies.WithPrincipal(ctx, pr), s.rule, policies.Target{NodeOwner: s.project}) {
				who = append(who, fmt.Sprintf(s.as, role))
				break
			}
		}
	}
	if len(who) == 0 {
		return "Nobody may enrol nodes under the policy in force (rule " + nodes.RuleCreate + ")."
	}
	return "Only " + strings.Join(who, " and ") + " may enrol nodes" + roleSaid(ctx, "; you are %s") + "."
}

func (p *Portal) enrolForm(c *fiber.Ctx, status int, n views.NewNode) error {
	ctx := c.UserContext()
	if !p.canEnrol(ctx) {
		return p.fail(c, errs.Forbidden("%s", p.enrolWho(ctx)))
	}
	pg, err := p.page(c, "Enrol a node")
	if err != nil {
		return err
	}
	if pr := policies.PrincipalFrom(ctx); pr != nil && !pr.System && !p.Guard.Allowed(ctx, nodes.RuleCreate, policies.Target{}) {
		n.OwnerFixed = pr.Project
	}
	return render(c, status, views.EnrolPage(pg, n))
}

func (p *Portal) newNodePage(c *fiber.Ctx) error { return p.enrolForm(c, 200, views.NewNode{}) }

// enrolDriver renders the driver's part of the form for the address
// typed (htmx asks when the address changes).
func (p *Portal) enrolDriver(c *fiber.Ctx) error {
	if ctx := c.UserContext(); !p.canEnrol(ctx) {
		return p.fail(c, errs.Forbidden("%s", p.enrolWho(ctx)))
	}
	e := readEnrolment(func(k string) string { return c.Query(k) })
	n := views.NewNode{Console: c.Query("console_interface")}
	if e.addr != nil {
		// Only the driver's section is shown: its problems wait for the
		// whole form.
		e.problems = nil
		v := e.view(c)
		n.Driver, n.DriverSaid, n.Extras, n.Consoles = v.Driver, v.DriverSaid, v.Extras, v.Consoles
		if n.Console == "" {
			n.Console = v.Console
		}
	}
	return render(c, 200, views.EnrolDriverFragment(n))
}

// enrol creates a node through the nodes service and its boot port
// through the ports service, each checking its own rule and auditing,
// then shows the new node. Every problem the form can find is said at
// once, at the top; a project nothing uses yet is asked about first.
func (p *Portal) enrol(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if !p.canEnrol(ctx) {
		return p.fail(c, errs.Forbidden("%s", p.enrolWho(ctx)))
	}
	e := readEnrolment(func(k string) string { return c.FormValue(k) })
	n := e.view(c)
	shown := c.FormValue("shown_driver")
	n.Changed = e.addr != nil && shown != "" && shown != n.DriverSaid && (len(n.Extras) > 0 || len(n.Consoles) > 1)
	if c.FormValue("step") == "fields" || n.Changed {
		// Without JavaScript, the address's fields are asked for by
		// sending the form, and shown before enrolling when the address
		// changed driver since; nothing is refused or made yet.
		n.Problems = nil
		return p.enrolForm(c, 200, n)
	}
	if len(e.problems) > 0 {
		return p.enrolForm(c, 400, n)
	}
	// A project nothing uses yet is most likely a slip of the keyboard;
	// asked only of a caller who may enrol for that owner, so the
	// question never stands in for the refusal.
	if p.mayEnrolFor(ctx, e.in.Owner) {
		unknown, err := p.unknownProjects(ctx, e.in.Owner, e.in.Lessee)
		if err != nil {
			return err
		}
		if len(unknown) > 0 && !newProjectsConfirmed(c, unknown) {
			n.NewProjects = unknown
			return p.enrolForm(c, 200, n)
		}
	}
	v, err := p.Nodes.Create(ctx, e.in)
	if err != nil {
		st := errs.Status(err)
		if st >= 500 {
			return err
		}
		if st == 403 {
			return p.fail(c, err)
		}
		field, said := "", err.Error()
		var fe *errs.Error
		if errors.As(err, &fe) && st == 400 {
			if strings.HasPrefix(fe.Field, "driver_info/") && e.addr != nil {
				field, _ = e.fieldOf(strings.TrimPrefix(fe.Field, "driver_info/"))
			} else if enrolLabels[fe.Field] != "" {
				field = fe.Field
			}
		}
		if st == 409 && e.in.Name != nil {
			field = "name"
		}
		e.problem(field, said)
		n.Problems = e.problems
		return p.enrolForm(c, st, n)
	}
	said := "Node " + nameOr(deref(v.Name), v.UUID) + " enrolled. Test its BMC connection, then manage it."
	if e.mac != "" {
		said += p.bootPort(ctx, v.UUID, e.mac)
	}
	return p.opDone(c, v.UUID, said)
}

// bootPort makes the port a node network-boots from, and says so only
// when it could not.
func (p *Portal) bootPort(ctx context.Context, node, mac string) string {
	pxe := true
	if _, err := p.Ports.CreatePort(ctx, ports.PortInput{Node: node, Address: mac, PXEEnabled: &pxe}); err != nil {
		return " Its boot port " + mac + " was not made: " + err.Error()
	}
	return ""
}

// enrolTest asks the BMC the form describes for its power state, before
// anything is saved, and says the answer next to the button (htmx swaps
// just that; without JavaScript the form comes back with it).
func (p *Portal) enrolTest(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if !p.canEnrol(ctx) {
		return p.fail(c, errs.Forbidden("%s", p.enrolWho(ctx)))
	}
	e := readEnrolment(func(k string) string { return c.FormValue(k) })
	n := e.view(c)
	n.Problems = nil
	var bmcProblems []string
	for _, pr := range e.problems {
		if pr.Field != "name" && pr.Field != "boot_mac" && pr.Field != "owner" && pr.Field != "lessee" && pr.Field != "resource_class" {
			bmcProblems = append(bmcProblems, pr.Label+": "+pr.Msg)
		}
	}
	if len(bmcProblems) > 0 {
		n.Tested, n.TestFailed = "Not tested: "+strings.Join(bmcProblems, " "), true
		return p.enrolTestDone(c, n)
	}
	state, err := p.Ops.CheckNewBMC(ctx, e.in.Driver, e.in.DriverInfo, e.in.Owner)
	switch {
	case err == nil:
		n.Tested = "The BMC answered: the machine is " + powerWords(state) + ". Anvil can reach it and log in."
	case errs.Status(err) == 403:
		return p.fail(c, err)
	case errs.Status(err) == 400:
		n.Tested = "The BMC settings are incomplete or wrong: " + err.Error()
	case errs.Status(err) == 503:
		s, advice := plainError(err.Error())
		n.Tested = s + " " + advice
	default:
		return p.fail(c, err)
	}
	n.TestFailed = err != nil
	return p.enrolTestDone(c, n)
}

func (p *Portal) enrolTestDone(c *fiber.Ctx, n views.NewNode) error {
	if c.Get("HX-Request") == "true" {
		return render(c, 200, views.EnrolTest(n))
	}
	return p.enrolForm(c, 200, n)
}
