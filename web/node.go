package web

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// busyStates are those in which the conductor is working on a node.
var busyStates = []string{nodes.StateCleaning, nodes.StateCleanWait, nodes.StateServicing, nodes.StateServiceWait,
	nodes.StateVerifying, conductor.StateAdopting, conductor.StateDeploying, conductor.StateDeployWait, conductor.StateDeleting}

// detail loads what the node page shows, deciding the buttons by policy.
func (p *Portal) detail(c *fiber.Ctx) (views.NodeDetail, error) {
	ctx := c.UserContext()
	v, err := p.Nodes.Get(ctx, c.Params("id"))
	if err != nil {
		return views.NodeDetail{}, err
	}
	d := views.NodeDetail{UUID: v.UUID, Name: deref(v.Name), Driver: v.Driver, Owner: v.Owner, Lessee: v.Lessee,
		ProvisionState: v.ProvisionState, TargetProvisionState: deref(v.TargetProvisionState),
		PowerState: deref(v.PowerState), TargetPowerState: deref(v.TargetPowerState), LastError: deref(v.LastError), Traits: v.Traits}
	if d.PowerState == "" {
		d.PowerState = "unknown"
	}
	if v.Maintenance {
		d.Maintenance = "yes: " + forViewer(isSystem(ctx), deref(v.MaintenanceReason))
	}
	d.Fault = deref(v.Fault)
	for _, m := range []map[string]any{v.CleanStep, v.ServiceStep} {
		if s, _ := m["step"].(string); s != "" {
			i, _ := m["interface"].(string)
			d.CurrentStep = i + "." + s
		}
	}
	d.Busy = slices.Contains(busyStates, v.ProvisionState) || d.TargetPowerState != ""
	for _, kind := range []string{"clean", "service"} {
		if total, ok := v.Node.DriverInternalInfo[kind+"_step_total"].(float64); ok && d.Busy {
			idx, _ := v.Node.DriverInternalInfo[kind+"_step_index"].(float64)
			d.StepIndex, d.StepTotal = int(idx)+1, int(total)
		}
	}
	if d.Busy {
		// A power action sets updated_at when it begins; a provision
		// state change sets provision_updated_at.
		since := v.UpdatedAt
		if d.TargetPowerState == "" && v.ProvisionUpdatedAt != nil {
			since = v.ProvisionUpdatedAt
		}
		if since != nil {
			d.Elapsed = elapsed(time.Since(*since))
		}
		if r, ok := conductor.StoredBMCRetry(v.Node.DriverInternalInfo); ok {
			d.BMCRetry = fmt.Sprintf("The BMC did not answer; try %d of %d, up to %s each, since %s ago.",
				r.Try, r.Of, elapsed(time.Duration(r.Timeout*float64(time.Second))), elapsed(time.Since(r.At)))
		}
	}
	system := isSystem(ctx)
	d.LastError = forViewer(system, d.LastError)
	d.ErrorSummary, d.ErrorAdvice = plainError(d.LastError)
	t := nodes.Target(v.Node)
	d.CanPower = p.Guard.Allowed(ctx, conductor.RuleSetPower, t)
	d.Console = p.consoleView(ctx, v)
	// Asked only of a viewer who may see the console: a refusal would be
	// audited as an attempt the viewer never made.
	if p.Guard.Allowed(ctx, conductor.RuleGetConsole, t) {
		if at, err := p.Ops.ScreenshotTaken(ctx, v.UUID); err == nil && !at.IsZero() {
			d.Screenshot = at.UTC().Format("2006-01-02 15:04:05 UTC")
		}
	}
	switch {
	case !d.CanPower:
		d.PowerWhy = p.denied(ctx, "may not change power", conductor.RuleSetPower)
	case d.TargetPowerState != "":
		d.PowerWhy = "A power action (to " + d.TargetPowerState + ") is in progress."
		// The rule that starts a power action stops one (Ops.CancelPower).
		d.CanCancelPower = true
		if r, ok := conductor.StoredPowerCancel(v.Node.DriverInternalInfo); ok {
			d.PowerCancel = "Cancel asked by " + r.By + "; the conductor stops the action at its next look."
		}
	case d.Busy:
		d.PowerWhy = "Power actions wait while the node is " + v.ProvisionState + "."
	}
	p.recovery(ctx, &d, v)
	switch {
	case !p.Guard.Allowed(ctx, conductor.RuleProvision, t):
		d.StepsWhy = p.denied(ctx, "may not start cleaning", conductor.RuleProvision)
	case !p.Guard.Allowed(ctx, conductor.RuleCleanSteps, t):
		d.StepsWhy = p.denied(ctx, "may not run explicit steps, only runbooks", conductor.RuleCleanSteps)
	case v.ProvisionState != nodes.StateManageable:
		d.StepsWhy = "Explicit steps run on manageable nodes; this node is " + v.ProvisionState + "."
	}
	p.tenancy(ctx, &d, v)
	if err := p.deployPanel(ctx, &d, v); err != nil {
		return d, err
	}
	p.operator(ctx, &d, v)
	d.Ops.Open = c.Query("ops") == "1"
	p.runnable(c, &d, v)
	if d.ErrorSummary != "" {
		d.ErrorAdvice += recoveryAdvice(&d, v.ProvisionState)
	}
	hardware(&d, v)
	if d.Machine, err = p.machine(ctx, v); err != nil {
		return d, err
	}
	d.HistoryPage, _ = strconv.Atoi(c.Query("history"))
	if d.HistoryPage < 1 {
		d.HistoryPage = 1
	}
	evs, total, err := p.Nodes.HistoryPage(ctx, v.UUID, (d.HistoryPage-1)*historyPageSize, historyPageSize)
	if err == nil {
		d.History = groupHistory(evs, d.Busy, system)
		d.HistoryTotal, d.HistoryPages = total, max(1, (total+historyPageSize-1)/historyPageSize)
	}
	if d.HistoryPage == 1 {
		d.LastRun = runFeedback(&d, v)
	}
	if d.Wipes, err = p.wipeRows(ctx, v.UUID, nodeWipes); err != nil {
		return d, err
	}
	if d.Leases, err = p.nodeLeases(ctx, v.UUID); err != nil {
		return d, err
	}
	if d.AgentLogs, d.ShowAgentLogs, err = p.agentLogRows(ctx, v); err != nil {
		return d, err
	}
	return d, nil
}

// elapsed words a wait the way a person reads it: "14 s", "2 min 5 s".
func elapsed(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s < 60 {
		return fmt.Sprintf("%d s", max(s, 0))
	}
	return fmt.Sprintf("%d min %d s", s/60, s%60)
}

// bmcFailures turn the kinds of BMC failure (bmc.Err*, which last_error
// carries as text) into a plain sentence and what to do about it.
var bmcFailures = []struct{ kind, summary, advice string }{
	{bmc.ErrPowerTimeout.Error(), "The BMC took the command, but the node did not reach the power state in time.",
		"Check the node's power supply, then try again."},
	{bmc.ErrUnreachable.Error(), "The BMC at this node did not answer.",
		"Check that the BMC is powered and on the network, then try again; an operator can check its address."},
	{bmc.ErrAuth.Error(), "The node's BMC refused the user name or password Anvil has for it.",
		"An operator must correct the node's BMC credentials."},
	{bmc.ErrTLS.Error(), "The node's BMC presented a certificate Anvil does not trust.",
		"An operator must install a trusted certificate on the BMC or change the node's verification setting."},
	{bmc.ErrNetwork.Error(), "The node's BMC address is outside the networks Anvil may reach.",
		"An operator must correct the BMC address or the allowed BMC networks."},
	{bmc.ErrUnsupported.Error(), "The node's BMC does not support this operation.", "Use another step or driver for this node."},
	{bmc.ErrBMC.Error(), "The node's BMC answered with an error.", "See the details; try again, or ask an operator."},
}

// apiHint is the conductor's pointer to the API call that fixes a
// failure ("(API: PUT /v1/nodes/…/states/raid)"): for operators and
// scripts, not for a project's people, whose pages never show an API
// path.
var apiHint = regexp.MustCompile(`\s*\(API: [^)]*\)`)

// forViewer is a conductor's message as the viewer reads it: without its
// API pointers unless the viewer acts for the system.
func forViewer(system bool, msg string) string {
	if system {
		return msg
	}
	return apiHint.ReplaceAllString(msg, "")
}

func isSystem(ctx context.Context) bool {
	pr := policies.PrincipalFrom(ctx)
	return pr != nil && pr.System
}

// failedStep reads the runner's words for a failed step ("Step
// raid.create_configuration failed: <reason>").
var failedStep = regexp.MustCompile(`^Step (\w+)\.(\w+) failed: (.+)$`)

// interfaceWords names a step's interface as a person does.
var interfaceWords = map[string]string{"raid": "RAID", "bios": "BIOS", "firmware": "firmware", "management": "management",
	"power": "power", "deploy": "deploy", "inspect": "inspection", "boot": "boot", "console": "console", "rescue": "rescue"}

// plainError is a one-line summary of last_error and what to do next;
// the text itself stays available behind a disclosure.
func plainError(lastError string) (summary, advice string) {
	if lastError == "" || lastError == nodes.RedactedLastError {
		return "", ""
	}
	summary, advice = "The last operation failed.", "See the details below."
	if m := failedStep.FindStringSubmatch(lastError); m != nil {
		// The step's own reason, which the runner already words for
		// people, led by which step it was.
		what := interfaceWords[m[1]]
		if what == "" {
			what = m[1]
		}
		reason := strings.TrimSpace(m[3])
		if !strings.HasSuffix(reason, ".") {
			reason += "."
		}
		summary, advice = fmt.Sprintf("The step %s.%s (%s) failed: %s", m[1], m[2], what, reason), ""
	}
	for _, f := range bmcFailures {
		if strings.Contains(lastError, f.kind) {
			summary, advice = f.summary, f.advice
			break
		}
	}
	if m := powerCancelled.FindStringSubmatch(lastError); m != nil {
		return fmt.Sprintf("%s was cancelled by %s.", m[1], m[2]), "The BMC had not confirmed it, so the power shown is what the BMC last reported; try again once the BMC answers."
	}
	if m := unanswered.FindStringSubmatch(lastError); m != nil {
		// Only a timeout waited the full time; a refused connection
		// fails at once, and saying "within 20 s" would mislead.
		switch m[1] {
		case "timeout":
			summary = fmt.Sprintf("The BMC at this node did not answer within %s s (%s %s).", m[4], m[2], m[3])
		case "name not resolved":
			summary = fmt.Sprintf("The BMC's host name could not be resolved (%s %s).", m[2], m[3])
			advice = "An operator must correct the node's BMC address or the name service."
		default:
			summary = fmt.Sprintf("The BMC at this node could not be reached (%s %s).", m[2], m[3])
		}
	}
	return summary, advice
}

// powerCancelled reads conductor.PowerCancelled: the action and who.
var powerCancelled = regexp.MustCompile(`^(.+) cancelled by (.+?); the BMC had not confirmed it`)

// unanswered reads the reason, tries and per-try wait bmc.Error's summary
// gives a BMC that did not answer ("(timeout) after 2 tries of 20 s each").
var unanswered = regexp.MustCompile(`did not answer(?: \(([^)]*)\))? after (\d+) (tries|try) of ([0-9.]+) s each`)

// recoveryAdvice says what the viewer may do about a failed run, as the
// Recovery section offers it.
func recoveryAdvice(d *views.NodeDetail, state string) string {
	back := map[string]string{nodes.StateCleanFailed: "Return to manageable", nodes.StateServiceFailed: "Return to active"}[state]
	switch {
	case back == "":
		return ""
	case d.Retry && len(d.Recovery) > 0:
		return " Then use “Retry” under Recovery to run it again, or “" + back + "”."
	case len(d.Recovery) > 0:
		return " Then use “" + back + "” under Recovery."
	case d.Notify:
		return " Project " + orSystem(d.Owner) + " or an operator can recover the node; use “Ask the owner to look” under Recovery to tell them."
	}
	return " Your role may not recover the node; ask a member of project " + orSystem(d.Owner) + " or an operator to."
}

func orSystem(owner string) string {
	if owner == "" {
		return "(none: the system)"
	}
	return owner
}

// historyPageSize is how many events a page of a node's history shows.
const historyPageSize = 25

// hardware fills the facts the node's properties record (as Ironic's
// inspection writes them) and its allocation and instance.
func hardware(d *views.NodeDetail, v *nodes.View) {
	d.CPUs, d.Memory, d.Disk = sizes(v.Properties)
	d.Arch, _ = v.Properties["cpu_arch"].(string)
	d.ResourceClass = deref(v.ResourceClass)
	d.InstanceUUID = deref(v.InstanceUUID)
	d.AllocationUUID = deref(v.AllocationUUID)
	if name, ok := v.InstanceInfo["display_name"].(string); ok {
		d.InstanceName = name
	}
}

// denied explains a policy refusal to the viewer: who they are acting as,
// what they may not do, and the rule that says so.
func (p *Portal) denied(ctx context.Context, what, rule string) string {
	return views.RuleRefusal(fmt.Sprintf("Not available: your role%s %s", roleSaid(ctx, " (%s)"), what), rule)
}

// roleSaid names the viewer's highest role and its scope ("system
// admin", "member of blue") in format, or "" when nobody is signed in.
func roleSaid(ctx context.Context, format string) string {
	pr := policies.PrincipalFrom(ctx)
	if pr == nil {
		return ""
	}
	role := "no role"
	for _, r := range []string{"admin", "manager", "member", "reader", "service"} {
		if slices.Contains(pr.Roles, r) {
			role = r
			break
		}
	}
	if pr.System {
		return fmt.Sprintf(format, "system "+role)
	}
	return fmt.Sprintf(format, role+" of "+pr.Project)
}

// recovery offers the ways out of a run in progress or a failed one, as
// the provision verbs allow them and where policy lets the viewer. A
// failed run is recovered through Ops.Recover: by those who may change
// the provision state and clear maintenance, or by those who may run a
// runbook its publisher left retryable; everyone else under
// anvil:node:recover may ask the owner to look.
func (p *Portal) recovery(ctx context.Context, d *views.NodeDetail, v *nodes.View) {
	label := d.Name
	if label == "" {
		label = d.UUID
	}
	switch v.ProvisionState {
	case nodes.StateCleaning, nodes.StateCleanWait, conductor.StateCleanHold, nodes.StateServicing, nodes.StateServiceWait, conductor.StateServiceHold:
		if !p.Guard.Allowed(ctx, conductor.RuleProvision, nodes.Target(v.Node)) {
			d.RecoveryWhy = p.denied(ctx, "may not abort runs", conductor.RuleProvision)
			return
		}
		d.Recovery = []views.Action{{Verb: "abort", Label: "Abort the run", Confirm: "Abort the run on " + label + "? The current step finishes; the rest do not run."}}
		return
	case conductor.StateInspectWait:
		if !p.Guard.Allowed(ctx, conductor.RuleProvision, nodes.Target(v.Node)) {
			d.RecoveryWhy = p.denied(ctx, "may not abort the inspection", conductor.RuleProvision)
			return
		}
		d.Recovery = []views.Action{{Verb: "abort", Label: "Abort the inspection", Confirm: "Abort the inspection of " + label + "? It ends in inspect failed and the machine is powered off."}}
		return
	case nodes.StateCleanFailed, nodes.StateServiceFailed:
	default:
		return
	}
	back := views.Action{Verb: "manage", Label: "Return to manageable", Confirm: "Return " + label + " to manageable? Its BMC is checked first."}
	if v.ProvisionState == nodes.StateServiceFailed {
		back = views.Action{Verb: "abort", Label: "Return to active", Confirm: "Return " + label + " to active without finishing the service?"}
	}
	r, ok := lastRun(v)
	if !ok {
		// Failed before any run was recorded: the provision verb alone.
		if !p.Guard.Allowed(ctx, conductor.RuleProvision, nodes.Target(v.Node)) {
			d.RecoveryWhy = p.denied(ctx, "may not recover the node", conductor.RuleProvision)
			return
		}
		d.Recovery = []views.Action{back}
		return
	}
	if why := p.recoverWhy(ctx, v, r); why != "" {
		d.RecoveryWhy = why
		d.Notify = p.Guard.Allowed(ctx, conductor.RuleRecover, nodes.Target(v.Node))
		return
	}
	d.Recovery = []views.Action{back}
	d.RetryWhat = r.what()
	if d.RetryWhy = p.retryWhy(ctx, v, r); d.RetryWhy == "" {
		d.Retry = true
	}
	// A lessee who may retry may still need the owner: a failure only
	// the owner can fix (a missing RAID configuration, say) does not go
	// away by running the steps again. Those who may clear maintenance
	// themselves are the owner's side and have no one to ask.
	t := nodes.Target(v.Node)
	d.Notify = p.Guard.Allowed(ctx, conductor.RuleRecover, t) &&
		!(p.Guard.Allowed(ctx, conductor.RuleProvision, t) && p.Guard.Allowed(ctx, nodes.RuleClearMaintenance, t))
}

// nodeProvision takes one of the recovery verbs the page offers; the
// service decides everything again. From a failed run the way back is a
// recovery, which also ends the maintenance the failure set.
func (p *Portal) nodeProvision(c *fiber.Ctx) error {
	target := c.FormValue("target")
	if target != "abort" && target != "manage" {
		return p.status(c, "Only abort and return to manageable are offered here.")
	}
	ctx := c.UserContext()
	v, err := p.Nodes.Get(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	if _, ok := lastRun(v); ok && (v.ProvisionState == nodes.StateCleanFailed || v.ProvisionState == nodes.StateServiceFailed) {
		err = p.Ops.Recover(ctx, v.UUID, conductor.RecoverReturn)
	} else {
		// The portal speaks the newest API: abort ends an inspect wait.
		err = p.Ops.Provision(ctx, v.UUID, conductor.ProvisionRequest{Target: target, InspectAbort: true})
	}
	if err != nil && errs.Status(err) >= 500 {
		return err
	}
	return p.status(c, errText(err))
}

// nodeNotify asks the node's owner to look at a failed run, with the
// asker's message: a thread in the owner's inbox and an event in the
// node's history.
func (p *Portal) nodeNotify(c *fiber.Ctx) error {
	_, err := p.Ops.AskOwner(c.UserContext(), c.Params("id"), c.FormValue("message"))
	if err != nil && errs.Status(err) >= 500 {
		return err
	}
	if err == nil {
		return p.statusNote(c, "The owner was asked to look at the failed run: the request is in their inbox, and their answer comes to yours.")
	}
	return p.status(c, errText(err))
}

func (p *Portal) nodePage(c *fiber.Ctx) error { return p.fullNodePage(c, 200, "", nil) }

// status renders the status section alone (htmx polling and actions),
// with problem shown in it.
func (p *Portal) status(c *fiber.Ctx, problem string) error { return p.statusWith(c, problem, "") }

// statusNote answers an action that succeeded with a note saying what it
// did, where the status section shows it.
func (p *Portal) statusNote(c *fiber.Ctx, note string) error { return p.statusWith(c, "", note) }

func (p *Portal) statusWith(c *fiber.Ctx, problem, note string) error {
	d, err := p.detail(c)
	if err != nil {
		return p.fail(c, err)
	}
	pg := views.Page{CSRF: sessionOf(c).CSRF, Error: problem, Note: note}
	if c.Get("HX-Request") != "true" {
		// Without JavaScript the form posted a whole page; go back to it,
		// carrying the refusal's reason (or the note) there.
		if problem != "" && c.Method() == fiber.MethodPost {
			return p.flashTo(c, "/nodes/"+d.UUID, "Not done: "+problem)
		}
		if note != "" && c.Method() == fiber.MethodPost {
			return p.flashTo(c, "/nodes/"+d.UUID, note)
		}
		return c.Redirect("/nodes/"+d.UUID, fiber.StatusSeeOther)
	}
	return render(c, 200, views.NodeStatusUpdate(pg, d))
}

func (p *Portal) nodeStatus(c *fiber.Ctx) error { return p.status(c, "") }

// fail answers a 404 (hidden or missing node) or 403 as a page.
func (p *Portal) fail(c *fiber.Ctx, err error) error {
	st := errs.Status(err)
	if st >= 500 {
		return err
	}
	return p.ErrorPage(c, st, err.Error())
}

// ErrorPage renders a browser's error page: signed-in viewers keep their
// header; anyone else (an unknown URL outside any session) gets the bare
// layout.
func (p *Portal) ErrorPage(c *fiber.Ctx, status int, detail string) error {
	title := map[int]string{403: "Not allowed", 404: "Not found"}[status]
	if title == "" {
		title = "Error"
	}
	pg := views.Page{Title: title}
	if _, ok := c.Locals(sessionLocal).(*Session); !ok && c.Method() == fiber.MethodGet {
		// An address no route serves never ran the session: the page
		// still carries the signed-in viewer's navigation.
		p.viewer(c)
	}
	if _, ok := c.Locals(sessionLocal).(*Session); ok {
		var err error
		if pg, err = p.page(c, title); err != nil {
			return err
		}
	}
	plain := p.plainDenial(c, status, detail)
	technical := ""
	if plain != detail {
		technical = detail
	}
	return render(c, status, views.ErrorPage(pg, status, plain, technical))
}

// viewer loads the session of a GET that no portal route took and, when
// it is a live sign-in, its principal: only to show the viewer's
// navigation on an error page, so nothing is changed or refreshed.
func (p *Portal) viewer(c *fiber.Ctx) {
	sess := p.Sessions.Load(c)
	if sess.User == "" || sess.Expired {
		return
	}
	ctx := c.UserContext()
	if rec, err := p.IDs.Session(ctx, sess.ID, sess.Principal()); err != nil || rec == nil {
		return
	}
	pr, err := p.principal(ctx, sess)
	if err != nil {
		return
	}
	c.Locals(sessionLocal, sess)
	c.SetUserContext(policies.WithPrincipal(ctx, pr))
}

// policyRefusal matches the API's words for a policy refusal: the
// guard's ("Access was denied to the following resource: node (policy
// baremetal:node:get)") and the enforcer's ("policy R does not allow this
// action").
var policyRefusal = regexp.MustCompile(`^(Access was denied to the following resource: .+ \(policy [^)]+\)|policy \S+ does not allow this action)$`)

// plainDenial says a policy refusal as a sentence about the viewer's
// role; ErrorPage keeps the API's words, with the rule, behind Details.
func (p *Portal) plainDenial(c *fiber.Ctx, status int, detail string) string {
	if status != 403 || !policyRefusal.MatchString(detail) {
		return detail
	}
	who := "You are"
	if said := roleSaid(c.UserContext(), "Your role (%s) is"); said != "" {
		who = said
	}
	return who + " not allowed to open this page. An administrator of your project, or an operator, can grant the access if you need it."
}
func (p *Portal) nodePower(c *fiber.Ctx) error {
	err := p.Ops.SetPower(c.UserContext(), c.Params("id"), c.FormValue("target"))
	if err != nil && errs.Status(err) >= 500 {
		return err
	}
	return p.status(c, errText(err))
}

// nodePowerCancel stops the power action under way (Ops.CancelPower
// finds, authorises, checks there is one, and audits).
func (p *Portal) nodePowerCancel(c *fiber.Ctx) error {
	err := p.Ops.CancelPower(c.UserContext(), c.Params("id"))
	switch {
	case err != nil && errs.Status(err) >= 500:
		return err
	case err != nil:
		return p.status(c, errText(err))
	}
	return p.statusNote(c, "Asked the conductor to cancel the power action; no further try is made.")
}

func (p *Portal) nodeClean(c *fiber.Ctx) error {
	var steps []conductor.Step
	dec := json.NewDecoder(strings.NewReader(c.FormValue("steps")))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&steps); err != nil {
		return p.status(c, "steps: not a JSON list of {interface, step, args}: "+err.Error())
	}
	err := p.Ops.Provision(c.UserContext(), c.Params("id"), conductor.ProvisionRequest{Target: "clean", CleanSteps: steps})
	if err != nil && errs.Status(err) >= 500 {
		return err
	}
	return p.status(c, errText(err))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// tenancy decides, field by field, whether the viewer may change the
// node's owner and lessee.
func (p *Portal) tenancy(ctx context.Context, d *views.NodeDetail, v *nodes.View) {
	t := nodes.Target(v.Node)
	for _, f := range []struct {
		why  *string
		name string
	}{{&d.OwnerWhy, "owner"}, {&d.LesseeWhy, "lessee"}} {
		rule := "baremetal:node:update:" + f.name
		if !p.Guard.Allowed(ctx, rule, t) {
			*f.why = p.denied(ctx, "may not change the "+f.name, rule)
		}
	}
}

// projectSuggestions bounds the names the owner and lessee fields offer.
const projectSuggestions = 200

// tenancyChanges are the JSON patch operations for the owner and lessee
// fields the form changed: a field left as it was is not patched, so it
// needs no permission.
func tenancyChanges(c *fiber.Ctx, v *nodes.View) (ops []map[string]any, set map[string]string) {
	set = map[string]string{}
	for _, f := range []struct{ name, cur string }{{"owner", v.Owner}, {"lessee", v.Lessee}} {
		if !c.Request().PostArgs().Has(f.name) {
			continue
		}
		val := strings.TrimSpace(c.FormValue(f.name))
		if val == f.cur {
			continue
		}
		set[f.name] = val
		if val == "" {
			ops = append(ops, map[string]any{"op": "replace", "path": "/" + f.name, "value": nil})
		} else {
			ops = append(ops, map[string]any{"op": "replace", "path": "/" + f.name, "value": val})
		}
	}
	return ops, set
}

// nodeTenancy sets a node's owner and lessee through the same JSON patch
// the API applies, so every field rule holds and the change is in the
// node's history. Clearing the owner is asked about first.
func (p *Portal) nodeTenancy(c *fiber.Ctx) error {
	ctx := c.UserContext()
	v, err := p.Nodes.Get(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	ops, set := tenancyChanges(c, v)
	label := nameOr(deref(v.Name), v.UUID)
	if len(ops) == 0 {
		return p.flashTo(c, "/nodes/"+v.UUID, "Nothing changed: the owner and lessee of "+label+" are as they were.")
	}
	if owner, ok := set["owner"]; ok && owner == "" && c.FormValue("confirmed") != "yes" {
		q := "Clear the owner of " + label + "?"
		lessee := v.Lessee
		if l, ok := set["lessee"]; ok {
			lessee = l
		}
		if lessee != "" {
			q += " Its lessee " + lessee + " keeps its lease."
		}
		return p.fullNodePage(c, 200, "", func(d *views.NodeDetail) { d.ConfirmClear, d.ConfirmLessee = q, lessee })
	}
	// A project nothing uses yet is most likely a slip of the keyboard:
	// it is saved only once the caller says it is a new project. Checked
	// and asked only of a caller who may make the change, so neither
	// stands in for the refusal the patch gives anyone else.
	unknown, err := p.unknownProjects(ctx, set["owner"], set["lessee"])
	if err != nil {
		return err
	}
	if p.mayChangeTenancy(ctx, v, set) {
		for f, val := range set {
			if err := nodes.ValidateProject(f, val); err != nil {
				return p.fullNodePage(c, errs.Status(err), err.Error(), nil)
			}
		}
		if len(unknown) > 0 && !newProjectsConfirmed(c, unknown) {
			return p.fullNodePage(c, 200, "", func(d *views.NodeDetail) {
				d.ConfirmProjects, d.ConfirmSet, d.ConfirmCleared = unknown, set, c.FormValue("confirmed") == "yes"
			})
		}
	}
	raw, _ := json.Marshal(ops)
	if _, err := p.Nodes.Patch(ctx, v.UUID, raw, nil); err != nil {
		if errs.Status(err) >= 500 {
			return err
		}
		return p.fullNodePage(c, errs.Status(err), err.Error(), nil)
	}
	var said []string
	for _, f := range []string{"Owner", "Lessee"} {
		val, ok := set[strings.ToLower(f)]
		switch {
		case !ok:
		case val == "":
			said = append(said, f+" of "+label+" cleared.")
		default:
			said = append(said, f+" of "+label+" set to "+val+".")
		}
	}
	for _, u := range unknown {
		said = append(said, "Project "+u+" is new.")
	}
	return p.flashTo(c, "/nodes/"+v.UUID, strings.Join(said, " "))
}

// newProjectsConfirmed reports whether the form says yes to every one of
// the new projects (a new_project field naming each).
func newProjectsConfirmed(c *fiber.Ctx, projects []string) bool {
	said := map[string]bool{}
	for _, v := range c.Request().PostArgs().PeekMulti("new_project") {
		said[string(v)] = true
	}
	for _, p := range projects {
		if !said[p] {
			return false
		}
	}
	return true
}

// mayChangeTenancy reports whether the caller may change every field of
// set on node v.
func (p *Portal) mayChangeTenancy(ctx context.Context, v *nodes.View, set map[string]string) bool {
	t := nodes.Target(v.Node)
	for f := range set {
		if !p.Guard.Allowed(ctx, "baremetal:node:update:"+f, t) {
			return false
		}
	}
	return true
}

// fullNodePage renders the whole node page, with a refusal (problem) or
// with edit applied to what it shows. Only here does the tenancy form
// get its project suggestions: the status polls, every second while the
// node is busy, never show them, so never pay the grouped scan.
func (p *Portal) fullNodePage(c *fiber.Ctx, status int, problem string, edit func(*views.NodeDetail)) error {
	d, err := p.detail(c)
	if err != nil {
		return p.fail(c, err)
	}
	if d.OwnerWhy == "" || d.LesseeWhy == "" {
		d.Projects, _ = p.Nodes.Projects(c.UserContext(), projectSuggestions)
	}
	if edit != nil {
		edit(&d)
	}
	pg, err := p.page(c, d.Name)
	if err != nil {
		return err
	}
	pg.Error = problem
	pg.Terminal = d.Console != nil && d.Console.Stream
	return render(c, status, views.Node(pg, d))
}

// nodeTenancyCheck warns, while a name is typed, of owner or lessee
// projects nothing uses yet. Only a viewer who may change one of the
// fields may ask.
func (p *Portal) nodeTenancyCheck(c *fiber.Ctx) error {
	ctx := c.UserContext()
	v, err := p.Nodes.Get(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	t := nodes.Target(v.Node)
	if !p.Guard.Allowed(ctx, "baremetal:node:update:owner", t) && !p.Guard.Allowed(ctx, "baremetal:node:update:lessee", t) {
		return p.fail(c, errs.Forbidden("%s", p.denied(ctx, "may not change the owner or lessee", "baremetal:node:update:lessee")))
	}
	var typed []string
	for _, f := range []string{"owner", "lessee"} {
		// The node's own projects are known to anyone who sees it.
		if val := strings.TrimSpace(c.Query(f)); val != v.Owner && val != v.Lessee {
			typed = append(typed, val)
		}
	}
	unknown, err := p.unknownProjects(ctx, typed...)
	if err != nil {
		return err
	}
	return render(c, 200, views.TenancyWarning(unknown))
}

// unknownProjects returns the names among projects that no node or user the
// caller can see belongs to; empty names are skipped.
func (p *Portal) unknownProjects(ctx context.Context, projects ...string) ([]string, error) {
	var unknown []string
	for _, name := range projects {
		if name == "" {
			continue
		}
		used, err := p.Nodes.ProjectKnown(ctx, name)
		if err != nil {
			return nil, err
		}
		if !used {
			unknown = append(unknown, name)
		}
	}
	return unknown, nil
}
