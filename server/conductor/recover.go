package conductor

import (
	"context"
	"fmt"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/nodes"
)

// RuleRecover lets those who ran a runbook recover the node its failed
// run left in clean failed or service failed (and in maintenance with a
// fault, as Ironic leaves it), when the runbook's publisher marked it
// retryable; anyone under the rule may ask the owner to look.
const RuleRecover = "anvil:node:recover"

// Recovery actions.
const (
	RecoverRetry  = "retry"  // run the failed runbook again
	RecoverReturn = "return" // back to manageable (clean) or active (service)
	RecoverNotify = "notify" // ask the node's owner to look
)

// Recover is the way forward after a failed clean or service run.
// Ironic's handlers put a node whose step failed into maintenance with a
// fault, and only those who may change its provision state and clear
// maintenance may then move it: for them Recover is the two at once
// (return, or retry the same runbook or steps). A runbook whose failure
// leaves nothing unsafe behind (a setting the BMC was busy for, say) is
// retryable unless its publisher opted out; then whoever may run it
// retries it or returns the node under RuleRecover alone. Anyone under the rule
// may ask the owner to look. Maintenance set for any other reason stays
// the owner's or an operator's to clear.
func (o *Ops) Recover(ctx context.Context, ident, action string) (err error) {
	return o.recover(ctx, ident, action, "", nil)
}

// AskOwner is Recover's notify with the asker's message: it opens a
// thread to the node's owner (the operators when it has none) in the
// inbox, when there is one, and returns its UUID.
func (o *Ops) AskOwner(ctx context.Context, ident, message string) (thread string, err error) {
	return thread, o.recover(ctx, ident, RecoverNotify, message, &thread)
}

// recover is Recover; a notify's thread UUID goes to thread.
func (o *Ops) recover(ctx context.Context, ident, action, message string, thread *string) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleRecover)
	if err != nil {
		return err
	}
	if action != RecoverRetry && action != RecoverReturn && action != RecoverNotify {
		return errs.BadRequest("action", "action %q is not one of %s, %s, %s", action, RecoverRetry, RecoverReturn, RecoverNotify)
	}
	detail := map[string]any{"action": action, "from": n.ProvisionState}
	defer func() { o.Guard.Done(ctx, RuleRecover, "node", n.UUID, err, detail) }()
	back := map[string]string{nodes.StateCleanFailed: "manage", nodes.StateServiceFailed: "abort"}[n.ProvisionState]
	target, runbook, steps, ok := LastRun(n.DriverInternalInfo)
	if back == "" || !ok {
		return errs.Conflict("Node %s has no failed run to recover: it is %s.", n.UUID, n.ProvisionState)
	}
	detail["runbook"] = runbook
	if action == RecoverNotify {
		return o.ask(ctx, n, runbook, message, detail, thread)
	}
	if n.Maintenance && !StepFault(n) {
		return errs.Conflict("Node %s is in maintenance for a reason other than its failed run; the owner or an operator clears it.", n.UUID)
	}
	t := nodes.Target(n)
	privileged := o.Guard.Allowed(ctx, RuleProvision, t) && o.Guard.Allowed(ctx, nodes.RuleClearMaintenance, t)
	if !privileged {
		if runbook == "" {
			return errs.Forbidden("The failed run was of explicit steps, not a runbook: the node's owner or an operator recovers it.")
		}
		if o.Runbooks == nil {
			return errs.BadRequest("action", "runbooks are not available")
		}
		traits, err := o.Nodes.Traits(ctx, n.UUID)
		if err != nil {
			return err
		}
		rb, err := o.Runbooks.Resolve(ctx, runbook, n, traits)
		if err != nil {
			return err
		}
		if !rb.Retryable {
			return errs.Forbidden("Runbook %s is not retryable: its publisher opted out; ask the node's owner to look (notify).", runbook)
		}
	}
	if action == RecoverReturn {
		return o.provision(ctx, n, ProvisionRequest{Target: back}, true)
	}
	// The retrier runs the run again: they must still be allowed to, as
	// if they asked for it alone.
	req := ProvisionRequest{Target: target, Runbook: runbook}
	switch {
	case runbook != "":
	case target == "clean":
		req.CleanSteps = steps
	default:
		req.ServiceSteps = steps
	}
	if _, err := o.Nodes.Authorized(ctx, n.UUID, ProvisionRules(target, runbook != "", runbook == "", false)...); err != nil {
		return err
	}
	return o.provision(ctx, n, req, true)
}

// StepFault says whether the node's maintenance is the one a failed clean
// or service step set (Ironic's fault), which a recovery may clear.
func StepFault(n *ent.Node) bool {
	return n.Fault != nil && (*n.Fault == FaultClean || *n.Fault == FaultService)
}

// ask records in n's history that the caller asks its owner to look at
// the failed run of runbook ("" for explicit steps) and, with an inbox,
// opens the thread that reaches the owner, with the caller's message and
// the node's last error as it stood.
func (o *Ops) ask(ctx context.Context, n *ent.Node, runbook, message string, detail map[string]any, thread *string) error {
	what := "steps"
	if runbook != "" {
		what = "runbook " + runbook
	}
	if o.Inbox != nil {
		failure := ""
		if n.LastError != nil {
			failure = *n.LastError
		}
		t, err := o.Inbox.Ask(ctx, inbox.AskInput{Node: n, Failure: failure, Message: message})
		if err != nil {
			return err
		}
		detail["thread"] = t.UUID
		if thread != nil {
			*thread = t.UUID
		}
	}
	return history.Record(ctx, o.C.db.Client, history.Event{NodeID: n.ID, Severity: history.Warning, Type: "notify",
		User: actor(ctx), Conductor: o.C.cfg.Name,
		Message: fmt.Sprintf("%s asks the owner to look at the failed %s (%s).", actor(ctx), what, n.ProvisionState)})
}
