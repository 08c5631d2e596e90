package nodes

import (
	"context"
	"testing"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/guard"
)

// TestRedactedFields checks that a field the caller's policy withholds
// reads exactly as Ironic's node_sanitize writes it, and that a granted
// one keeps its value.
func TestRedactedFields(t *testing.T) {
	// An operator withholding last_error from lessees, as Ironic's default does.
	enf, err := policies.New(policies.Defaults(), map[string]string{"baremetal:node:get:last_error": "rule:system_or_owner_reader"})
	if err != nil {
		t.Fatal(err)
	}
	lock, le := "conductor-1", "power on failed"
	n := &ent.Node{Owner: "own", Lessee: "les", Reservation: &lock, LastError: &le,
		DriverInfo: map[string]any{"ipmi_address": "192.0.2.1"}, DriverInternalInfo: map[string]any{"k": "v"}}
	view := func(project string) *View {
		p := &policies.Principal{User: "u", Project: project, Roles: policies.ExpandRoles([]string{"admin"})}
		return newRedactor(&guard.Guard{Enforcer: enf}).view(policies.WithPrincipal(context.Background(), p), n, nil)
	}

	lessee := view("les")
	if got := lessee.DriverInfo["content"]; got != "** Redacted - requires baremetal:node:get:driver_info permission. **" || len(lessee.DriverInfo) != 1 {
		t.Errorf("driver_info = %v", lessee.DriverInfo)
	}
	if got := lessee.DriverInternalInfo["content"]; got != "** Redacted - Requires baremetal:node:get:driver_internal_info permission. **" || len(lessee.DriverInternalInfo) != 1 {
		t.Errorf("driver_internal_info = %v", lessee.DriverInternalInfo)
	}
	if lessee.Reservation == nil || *lessee.Reservation != "** Redacted - requires baremetal:node:get:reservation permission. **" {
		t.Errorf("reservation = %v", lessee.Reservation)
	}
	if lessee.LastError == nil || *lessee.LastError != "** Value Redacted - Requires baremetal:node:get:last_error permission. **" {
		t.Errorf("last_error = %v", lessee.LastError)
	}
	// Two views never share a redaction map a caller could change.
	lessee.DriverInfo["content"] = "changed"
	if view("les").DriverInfo["content"] == "changed" {
		t.Error("redacted driver_info is shared between views")
	}

	owner := view("own")
	if owner.DriverInfo["ipmi_address"] != "192.0.2.1" || owner.DriverInternalInfo["k"] != "v" ||
		owner.Reservation == nil || *owner.Reservation != lock || owner.LastError == nil || *owner.LastError != le {
		t.Errorf("owner admin view lost granted values: %+v", owner)
	}
}

// Ironic's _node_sanitize_extended replaces last_error whatever it holds,
// null included, for a caller without baremetal:node:get:last_error;
// under Anvil's default rule (system_or_project_reader: the runbook and
// lessee specs let a lessee see why its run failed) a lessee reader has
// it, so null reads null.
func TestLastErrorRedactedWhenNullToo(t *testing.T) {
	n := &ent.Node{Owner: "own", Lessee: "les"}
	view := func(overrides map[string]string, project string) *View {
		enf, err := policies.New(policies.Defaults(), overrides)
		if err != nil {
			t.Fatal(err)
		}
		p := &policies.Principal{User: "u", Project: project, Roles: policies.ExpandRoles([]string{"reader"})}
		return newRedactor(&guard.Guard{Enforcer: enf}).view(policies.WithPrincipal(context.Background(), p), n, nil)
	}
	if v := view(map[string]string{"baremetal:node:get:last_error": "rule:system_or_owner_reader"}, "les"); v.LastError == nil || *v.LastError != RedactedLastError {
		t.Errorf("withheld null last_error = %v, want the redaction sentence", v.LastError)
	}
	if v := view(nil, "les"); v.LastError != nil {
		t.Errorf("a lessee reader's null last_error under Anvil's default = %q, want null", *v.LastError)
	}
}
