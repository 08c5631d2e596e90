package web

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/user"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// auditNames are the names a page of events mentions, found for the whole
// page at once: nodes by UUID (a node without a name maps to "", one that
// is gone is absent) and the local accounts that exist now.
type auditNames struct {
	nodes    map[string]string
	accounts map[string]bool
}

// auditRows turns a page of events into sentences a person reads: the
// user's and node's names, the rule's description, the change as before
// and after, and the record as stored behind Details. Names take one
// query for the page's nodes and one for its users, however many rows.
func (p *Portal) auditRows(ctx context.Context, evs []*ent.AuditEvent) ([]views.AuditRow, error) {
	names, err := p.auditNames(ctx, evs)
	if err != nil {
		return nil, err
	}
	rows := make([]views.AuditRow, len(evs))
	for i, e := range evs {
		rows[i] = names.row(e)
	}
	return rows, nil
}

func (p *Portal) auditNames(ctx context.Context, evs []*ent.AuditEvent) (auditNames, error) {
	n := auditNames{nodes: map[string]string{}, accounts: map[string]bool{}}
	var uuids, users []string
	for _, e := range evs {
		uuids = append(uuids, eventNodes(e)...)
		if e.User != "" && !strings.HasPrefix(e.User, "sso:") {
			users = append(users, e.User)
		}
	}
	if len(uuids) > 0 {
		slices.Sort(uuids)
		var found []struct {
			UUID string  `json:"uuid"`
			Name *string `json:"name"`
		}
		if err := p.Admin.DB.Node.Query().Where(node.UUIDIn(slices.Compact(uuids)...)).
			Select(node.FieldUUID, node.FieldName).Scan(ctx, &found); err != nil {
			return n, err
		}
		for _, f := range found {
			n.nodes[f.UUID] = ""
			if f.Name != nil {
				n.nodes[f.UUID] = *f.Name
			}
		}
	}
	if len(users) > 0 {
		slices.Sort(users)
		have, err := p.Admin.DB.User.Query().Where(user.NameIn(slices.Compact(users)...)).Select(user.FieldName).Strings(ctx)
		if err != nil {
			return n, err
		}
		for _, u := range have {
			n.accounts[u] = true
		}
	}
	return n, nil
}

// eventNodes are the node UUIDs an event names: its target, the node a
// lease or offer is for, or the sample targets of aggregated denials.
func eventNodes(e *ent.AuditEvent) []string {
	var out []string
	if e.TargetType == "node" && e.TargetID != "" {
		out = append(out, e.TargetID)
	}
	if s, ok := e.Detail["node"].(string); ok && s != "" {
		out = append(out, s)
	}
	if e.TargetType == "node" && e.TargetID == "" {
		out = append(out, sampleTargets(e)...)
	}
	return out
}

func sampleTargets(e *ent.AuditEvent) []string {
	ts, _ := e.Detail["targets"].([]any)
	var out []string
	for _, t := range ts {
		if s, ok := t.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// ruleText is each rule's description, for the sentence and Details.
var ruleText = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	for _, r := range policies.Defaults() {
		m[r.Name] = r.Description
	}
	// Inbox notices are audit rows too (the webhook sends them), named
	// by kind rather than by a policy rule.
	for kind, text := range map[string]string{
		inbox.OfferClaimed: "Tell a project of a claim on its offer", inbox.LeaseStarted: "Tell a lease's lessee and owner it started",
		inbox.LeaseEnding: "Tell a lessee its lease ends within a day", inbox.LeaseEnded: "Tell a lease's lessee and owner it ended",
		inbox.NodeWiped: "Tell a node's last tenant and owner how it was wiped", inbox.Ask: "Ask a node's owner to look at a failed run",
		inbox.AskReply: "Tell the other side of a request of an answer", inbox.AskClosed: "Tell the asker its request was closed",
	} {
		m[inbox.EventPrefix+kind] = text + " (inbox notice; the webhook and mail carry it too)."
	}
	return m
})

// ruleAction is the start of a rule's description, the part that says
// what the rule lets one do: "Power a node on, off or reboot it" of
// "Power a node on, off or reboot it: system members, and …".
func ruleAction(desc string) string {
	if i := strings.Index(desc, ": "); i > 0 {
		desc = desc[:i]
	}
	if i := strings.Index(desc, ". "); i > 0 {
		desc = desc[:i]
	}
	return strings.TrimSuffix(desc, ".")
}

// powerVerbs are a power target as done and as meant.
var powerVerbs = map[string][2]string{
	"power on": {"powered on", "power on"}, "power off": {"powered off", "power off"},
	"rebooting": {"rebooted", "reboot"}, "soft power off": {"soft powered off", "soft power off"},
	"soft rebooting": {"soft rebooted", "soft reboot"},
}

// verb is what an event did, in the past tense (done) and as meant
// (try), for the rules whose record says enough to put it in a verb;
// other rules read from their description.
func verb(e *ent.AuditEvent) (done, try string, ok bool) {
	target, _ := e.Detail["target"].(string)
	switch e.Rule {
	case conductor.RuleSetPower:
		if w, ok := powerVerbs[target]; ok {
			return w[0], w[1], true
		}
	case nodes.RuleCreate, nodes.RuleCreateSelfOwned:
		return "enrolled", "enrol", true
	case nodes.RuleDelete, nodes.RuleDeleteSelfOwned:
		return "deleted", "delete", true
	case nodes.RuleUpdate:
		return "changed", "change", true
	case nodes.RuleSetMaintenance:
		return "put into maintenance", "put into maintenance", true
	case nodes.RuleClearMaintenance:
		return "took out of maintenance", "take out of maintenance", true
	case conductor.RuleProvision:
		if target != "" {
			return fmt.Sprintf("sent the provision action %q to", target), fmt.Sprintf("send the provision action %q to", target), true
		}
	}
	return "", "", false
}

func (n auditNames) row(e *ent.AuditEvent) views.AuditRow {
	r := views.AuditRow{ID: e.ID, At: e.CreatedAt, Who: who(e.User), WhoID: e.User, Result: e.Result, Status: e.Status,
		Rule: e.Rule, RuleText: ruleText()[e.Rule], RequestID: e.RequestID, Project: e.Project, Scope: e.Scope,
		Method: e.Method, Path: e.Path, Target: strings.TrimSpace(e.TargetType + " " + e.TargetID), Raw: detailText(e)}
	if e.User != "" && !strings.HasPrefix(e.User, "sso:") && !n.accounts[e.User] {
		r.WhoID += " (no local account by this name now)"
	}
	on := n.target(e)
	count, _ := e.Detail["count"].(float64)
	done, try, ok := verb(e)
	action := ruleAction(r.RuleText)
	switch {
	case ok && e.Result == audit.Allowed:
		r.Did = join(done, on)
	case ok && e.Result == audit.Denied:
		r.Did = join("was refused permission to "+try, on)
	case ok:
		r.Did = join("tried to "+try, on) + ", which failed"
	case action != "":
		// The description is an imperative ("Create a node"), so it is
		// set apart rather than made to read as a past tense.
		r.Did = "— " + action + " —"
		if on != "" {
			r.Did += " on " + on
		}
	case e.Result == audit.Denied:
		r.Did = join("was refused", on)
	default:
		r.Did = join("acted on", on)
	}
	r.Outcome = outcome(e, count)
	r.Change, r.Asked = change(e, n)
	return r
}

func join(a, b string) string { return strings.TrimSpace(a + " " + b) }

// who is a stored user as people know them: a local account by its name,
// an SSO identity ("sso:subject@issuer (display name)") by its display
// name. Work no request of a signed-in user started (the CLI, the
// conductor, a ramdisk agent's lookup) has no user and says so.
func who(u string) string {
	if u == "" {
		return "No signed-in user"
	}
	if rest, ok := strings.CutPrefix(u, "sso:"); ok {
		if i := strings.LastIndex(rest, " ("); i >= 0 && strings.HasSuffix(rest, ")") {
			return rest[i+2 : len(rest)-1]
		}
	}
	return u
}

// target names what an event was on: a node by its name, or by its UUID
// when it has none or is gone; anything else by its type and id.
func (n auditNames) target(e *ent.AuditEvent) string {
	if e.TargetType == "node" {
		if e.TargetID != "" {
			return "node " + n.node(e.TargetID)
		}
		ts := sampleTargets(e)
		for i, t := range ts {
			ts[i] = n.node(t)
		}
		if len(ts) > 0 {
			return "nodes " + strings.Join(ts, ", ")
		}
		return ""
	}
	on := strings.TrimSpace(e.TargetType + " " + e.TargetID)
	if u, ok := e.Detail["node"].(string); ok && u != "" && on != "" {
		on += " for node " + n.node(u)
	}
	return on
}

func (n auditNames) node(uuid string) string {
	name, ok := n.nodes[uuid]
	switch {
	case !ok:
		return uuid + " (not enrolled now)"
	case name == "":
		return uuid
	}
	return name
}

func outcome(e *ent.AuditEvent, count float64) string {
	switch e.Result {
	case audit.Allowed:
		return "Allowed"
	case audit.Denied:
		if count > 1 {
			return fmt.Sprintf("Denied by policy, %d times", int(count))
		}
		return "Denied by policy"
	}
	s := fmt.Sprintf("Failed (%d)", e.Status)
	if msg, ok := e.Detail["error"].(string); ok && msg != "" {
		s += ": " + msg
	}
	return s
}

// notAsked are detail keys that say how an event went rather than what
// it asked for: the error, a denial's aggregation, the change itself.
var notAsked = map[string]bool{"error": true, "count": true, "first": true, "last": true, "targets": true,
	"before": true, "after": true, "was": true, "changed": true, "ops": true}

// change reads an event's detail as a change: the fields changed, before
// and after, where the record keeps both (a node's plain fields, a power
// state, a lease's end), or else what was asked for. A change refused or
// failed did not happen, so it is only asked for.
func change(e *ent.AuditEvent, n auditNames) (changed, asked []views.AuditChange) {
	d := e.Detail
	before, _ := d["before"].(map[string]any)
	after, _ := d["after"].(map[string]any)
	for _, f := range slices.Sorted(maps.Keys(after)) {
		changed = append(changed, views.AuditChange{Field: f, Before: value(before[f]), After: value(after[f])})
	}
	if fs, ok := d["changed"].([]any); ok {
		for _, f := range fs {
			s, _ := f.(string)
			if _, shown := after[s]; !shown && s != "" {
				changed = append(changed, views.AuditChange{Field: s, Before: "not recorded", After: "changed"})
			}
		}
	}
	if was, ok := d["was"]; ok {
		field, to := "power state", d["target"]
		if e.Rule != conductor.RuleSetPower {
			field, to = "end time", d["end_time"]
		}
		changed = append(changed, views.AuditChange{Field: field, Before: value(was), After: value(to)})
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		if !notAsked[k] && !(len(changed) > 0 && (k == "target" || k == "end_time")) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := value(d[k])
		if k == "node" {
			if s, ok := d[k].(string); ok {
				v = n.node(s)
			}
		}
		asked = append(asked, views.AuditChange{Field: k, After: v})
	}
	if e.Result != audit.Allowed {
		for _, c := range changed {
			if c.Before != "not recorded" {
				asked = append(asked, views.AuditChange{Field: c.Field, After: c.After})
			}
		}
		changed = nil
	}
	return changed, asked
}

// value is a detail's value as text: strings as they are, nothing as
// "none", the rest as JSON.
func value(v any) string {
	switch v := v.(type) {
	case nil:
		return "none"
	case string:
		if v == "" {
			return "none"
		}
		return v
	}
	b, _ := json.Marshal(v)
	return string(b)
}
