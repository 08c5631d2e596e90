// Package guard is the one door every action passes: it asks the policy
// enforcer and writes the audit row for a refusal, so no service can
// forget either half.
package guard

import (
	"context"
	"errors"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/errs"
)

// Guard authorizes actions and audits their outcome.
type Guard struct {
	Enforcer *policies.Enforcer
	Audit    *audit.Log
}

// Allowed reports whether the caller may do rule on target, without
// auditing: for deciding what to show (buttons, redacted fields).
func (g *Guard) Allowed(ctx context.Context, rule string, t policies.Target) bool {
	return g.Enforcer.Authorize(ctx, rule, t) == nil
}

// Authorize returns nil when allowed, else a 403 that is audited as a
// denial. Callers that must hide the target's existence turn it into 404
// (see Hide).
func (g *Guard) Authorize(ctx context.Context, rule, targetType, targetID string, t policies.Target) error {
	err := g.Enforcer.Authorize(ctx, rule, t)
	if err == nil {
		return nil
	}
	if !errors.Is(err, policies.ErrDenied) {
		return err
	}
	g.Audit.Denied(ctx, audit.Entry{Rule: rule, TargetType: targetType, TargetID: targetID, Result: audit.Denied, Status: 403})
	return errs.Forbidden("Access was denied to the following resource: %s (policy %s)", targetType, rule)
}

// Done audits a completed (or failed) mutation.
func (g *Guard) Done(ctx context.Context, rule, targetType, targetID string, err error, detail map[string]any) {
	g.Audit.Done(ctx, rule, targetType, targetID, err, detail)
}
