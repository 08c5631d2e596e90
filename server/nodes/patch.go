package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/lease"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodescreenshot"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/patchdoc"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/urlsafe"
)

// fieldRules is what a JSON patch may change and the rule guarding each
// field, as Ironic splits them (ironic/api/controllers/v1/node.py,
// _authorize_patch_and_get_node). Fields with the generic rule only are
// guarded by baremetal:node:update alone.
var fieldRules = func() map[string]string {
	m := map[string]string{
		"name":              "baremetal:node:update:name",
		"driver":            RuleUpdateDriverIfaces,
		"driver_info":       "baremetal:node:update:driver_info",
		"properties":        "baremetal:node:update:properties",
		"instance_uuid":     "baremetal:node:update:instance_uuid",
		"owner":             "baremetal:node:update:owner",
		"lessee":            "baremetal:node:update:lessee",
		"conductor_group":   RuleUpdateConductorGroup,
		"extra":             RuleUpdateExtra,
		"instance_info":     RuleUpdateInstInfo,
		"instance_name":     RuleUpdateInstInfo,
		"network_data":      RuleUpdateNetworkData,
		"retired":           RuleUpdateRetired,
		"retired_reason":    RuleUpdateRetired,
		"shard":             RuleUpdateShard,
		"parent_node":       RuleUpdateParentNode,
		"disable_power_off": RuleUpdateDisablePowerOff,
		"resource_class":    RuleUpdate,
		"description":       RuleUpdate,
		"maintenance":       RuleUpdate,
		"protected":         RuleUpdate,
		"protected_reason":  RuleUpdate,
		// Turning automated cleaning off also needs disable_cleaning
		// (see patchRules).
		"automated_clean": RuleUpdate,
		"chassis_uuid":    RuleUpdateChassis,
	}
	for _, t := range bmc.InterfaceTypes {
		m[t+"_interface"] = RuleUpdateDriverIfaces
	}
	return m
}()

// RuleUpdateChassis guards moving a node between chassis.
const RuleUpdateChassis = "baremetal:node:update:chassis_uuid"

// readOnly are node fields that exist but only Anvil changes.
var readOnly = map[string]bool{
	"uuid": true, "id": true, "created_at": true, "updated_at": true, "power_state": true,
	"target_power_state": true, "provision_state": true, "target_provision_state": true,
	"last_error": true, "maintenance_reason": true, "reservation": true,
	"clean_step": true, "service_step": true, "driver_internal_info": true, "traits": true,
	"provision_updated_at": true, "links": true, "allocation_uuid": true, "fault": true,
	"console_enabled": true, "raid_config": true, "target_raid_config": true, "deploy_step": true,
	"boot_mode": true, "secure_boot": true, "inspection_started_at": true, "inspection_finished_at": true,
	"conductor": true, "health": true,
}

// PatchOp is the part of a JSON-patch operation the service validates
// before applying the patch through the library.
type PatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
	From  string          `json:"from,omitempty"`
}

// DecodePatch decodes an RFC 6902 document's shape only: a non-empty list
// of operations. What each operation may touch is decided after the
// caller is known to see the resource and to be allowed to change it.
func DecodePatch(raw []byte) ([]PatchOp, error) {
	ops, err := decodeOps(raw)
	if err != nil {
		return nil, err
	}
	return ops, nonEmpty(ops)
}

// decodeOps decodes a patch that may be empty: a node's emptiness is
// refused only after the caller is known to see the node and to hold the
// update rule, as Ironic authorizes an empty node patch (so a reader
// learns nothing from its answer but what a GET tells).
func decodeOps(raw []byte) ([]PatchOp, error) {
	var ops []PatchOp
	if err := json.Unmarshal(raw, &ops); err != nil {
		return nil, errs.BadRequest("patch", "the body must be a JSON patch: a list of {op, path, value} objects (%v)", err)
	}
	return ops, nil
}

func nonEmpty(ops []PatchOp) error {
	if len(ops) == 0 {
		return errs.BadRequest("patch", "the patch is empty")
	}
	return nil
}

// checkOps checks each operation's shape and target field, naming the
// offending path on error.
func checkOps(ops []PatchOp) error {
	for i, op := range ops {
		switch op.Op {
		case "add", "replace", "test":
			if op.Value == nil {
				return errs.BadRequest("patch", "operation %d (%s %s) needs a value", i, op.Op, op.Path)
			}
		case "remove":
		case "move", "copy":
			if _, err := PatchField(op.From); err != nil {
				return err
			}
			if isSecretPath(op.From) {
				return errs.BadRequest(strings.ReplaceAll(strings.TrimPrefix(op.From, "/"), "/", "."), "operation %d: %s holds a secret, which can be replaced or removed but not copied or moved", i, op.From)
			}
			// A field not every reader of the node may read stays where it
			// is: a copy in another field would show it (driver_info's
			// BMC address and username, say, in extra) to readers its own
			// read rule keeps out.
			if from, to := topField(op.From), topField(op.Path); readRules[from] != "" && from != to {
				return errs.BadRequest(from, "operation %d: %s is shown only to callers granted %s, so it can be copied or moved within %s but not into %s", i, op.From, readRules[from], from, to)
			}
		default:
			return errs.BadRequest("patch", "operation %d has op %q; use add, replace, remove, move, copy or test", i, op.Op)
		}
		if _, err := PatchField(op.Path); err != nil {
			return err
		}
	}
	return nil
}

// PatchField returns the top-level node field a patch path touches, or an
// error if that field cannot be patched.
func PatchField(path string) (string, error) {
	if !strings.HasPrefix(path, "/") || len(path) < 2 {
		return "", errs.BadRequest("patch", "path %q is not a JSON pointer such as /extra/foo", path)
	}
	f := topField(path)
	if readOnly[f] {
		return "", errs.BadRequest(f, "'/%s' is an internal attribute and can not be updated", f)
	}
	if _, ok := fieldRules[f]; !ok {
		return "", errs.BadRequest(f, "%s is not a node attribute that can be patched", path)
	}
	return f, nil
}

// isSecretPath reports whether path names a secret value itself, such as
// /driver_info/ipmi_password. Reading one inside a patch would only yield
// its mask, so copying or moving it is refused outright.
func isSecretPath(path string) bool {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) < 2 {
		return false
	}
	switch parts[0] {
	case "driver_info":
		return bmc.IsSecretKey(parts[1])
	case "instance_info":
		return isInstanceSecret(parts[1])
	}
	return false
}

// chassisUUID is the UUID of the node's chassis, loaded as its edge.
func chassisUUID(n *ent.Node) any {
	if n.Edges.Chassis == nil {
		return nil
	}
	return n.Edges.Chassis.UUID
}

func topField(path string) string {
	f, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return f
}

// patchRules are the rules a patch needs, decided from the paths it names
// as Ironic decides them: a field with its own rule needs that rule, any
// other field (or an empty patch) the generic update rule. A move also
// changes the field it takes from, so its source counts too; a test names
// a field it probes.
func patchRules(ops []PatchOp) []string {
	seen := map[string]bool{}
	var rules []string
	add := func(path string) {
		r, ok := fieldRules[topField(path)]
		if !ok {
			r = RuleUpdate
		}
		if !seen[r] {
			seen[r] = true
			rules = append(rules, r)
		}
	}
	for _, op := range ops {
		add(op.Path)
		if op.Op == "move" {
			add(op.From)
		}
		if topField(op.Path) == "automated_clean" && (op.Op == "add" || op.Op == "replace") {
			if b, err := parseBool(op.Value); err == nil && b != nil && !*b && !seen[RuleDisableCleaning] {
				seen[RuleDisableCleaning] = true
				rules = append(rules, RuleDisableCleaning)
			}
		}
	}
	if len(rules) == 0 {
		rules = append(rules, RuleUpdate)
	}
	return rules
}

// parseBool reads a boolean as Ironic's args.boolean does: a JSON
// boolean or one of its strings ("true", "off", "1", …); null is nil.
func parseBool(raw json.RawMessage) (*bool, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return boolValue(v)
}

func boolValue(v any) (*bool, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case bool:
		return &x, nil
	case string:
		switch strings.ToLower(x) {
		case "1", "t", "true", "on", "y", "yes":
			return new(true), nil
		case "0", "f", "false", "off", "n", "no":
			return new(false), nil
		}
	}
	return nil, fmt.Errorf("not a boolean")
}

// readRules maps fields that not every caller who may see a node may read
// to the rule that grants reading them. A patch that reads such a field
// (copy or move from it, test against it) needs that rule as well, so a
// write can never carry out what a read would not show.
var readRules = map[string]string{
	"driver_info": RuleGetDriverInfo,
}

func readRulesOf(ops []PatchOp) []string {
	var rules []string
	for _, op := range ops {
		src := op.From
		if op.Op == "test" {
			src = op.Path
		}
		if op.Op != "copy" && op.Op != "move" && op.Op != "test" {
			continue
		}
		if r, ok := readRules[topField(src)]; ok && !contains(rules, r) {
			rules = append(rules, r)
		}
	}
	return rules
}

// patchDoc is the node as the patch sees it: what the caller could read,
// with every secret masked. Reads inside the patch (copy, move, test) thus
// see exactly what a GET shows and cannot lift or probe a secret; secrets
// left in place are restored after the patch by keepSecrets.
func patchDoc(n *ent.Node) map[string]any {
	str := func(p *string) any {
		if p == nil {
			return nil
		}
		return *p
	}
	proj := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var autoClean any
	if n.AutomatedClean != nil {
		autoClean = *n.AutomatedClean
	}
	doc := map[string]any{
		"name": str(n.Name), "driver": n.Driver, "driver_info": MaskSecrets(n.DriverInfo),
		"properties": cloneMap(n.Properties), "extra": cloneMap(n.Extra),
		"instance_info": MaskInstanceInfo(n.InstanceInfo), "owner": proj(n.Owner), "lessee": proj(n.Lessee),
		"resource_class": str(n.ResourceClass), "instance_uuid": str(n.InstanceUUID),
		"description": str(n.Description), "conductor_group": n.ConductorGroup,
		"chassis_uuid": chassisUUID(n),
		"maintenance":  n.Maintenance, "protected": n.Protected, "protected_reason": str(n.ProtectedReason),
		"retired": n.Retired, "retired_reason": str(n.RetiredReason), "automated_clean": autoClean,
		"network_data": cloneMap(n.NetworkData), "shard": str(n.Shard), "parent_node": str(n.ParentNode),
		"disable_power_off": n.DisablePowerOff, "instance_name": str(n.InstanceName),
	}
	for _, t := range bmc.InterfaceTypes {
		impl := StoredInterface(n, t)
		if impl == "" {
			impl = bmc.DefaultInterface(n.Driver, t)
		}
		doc[t+"_interface"] = impl
	}
	return doc
}

// urlFields are the fields whose image URLs a caller below system admin
// reads stripped of their credentials (see SeesURLs).
var urlFields = []string{"driver_info", "instance_info"}

// strippedDoc is doc as a caller below system admin reads it: a patch's
// reads (copy, move, test) then see the URLs a GET shows and cannot lift
// a signed token or a password into extra, or probe one with test.
func strippedDoc(doc map[string]any) map[string]any {
	out := maps.Clone(doc)
	for _, f := range urlFields {
		if m, ok := doc[f].(map[string]any); ok {
			out[f] = urlsafe.StripMap(m)
		}
	}
	return out
}

// restoreStripped puts the stored value back wherever the patch left a
// URL field's value as the caller saw it, stripped: the patch did not
// change it, and writing the stripped form back would lose the URL's
// credentials that the BMC needs.
func restoreStripped(seen, stored, after map[string]any) {
	for _, f := range urlFields {
		if v, ok := after[f]; ok {
			after[f] = restoreValue(seen[f], stored[f], v)
		}
	}
}

func restoreValue(seen, stored, after any) any {
	if reflect.DeepEqual(seen, after) {
		return stored
	}
	a, ok := after.(map[string]any)
	sn, ok2 := seen.(map[string]any)
	st, ok3 := stored.(map[string]any)
	if !ok || !ok2 || !ok3 {
		return after
	}
	for k, v := range a {
		if sv, in := sn[k]; in {
			if stv, in := st[k]; in {
				a[k] = restoreValue(sv, stv, v)
			}
		}
	}
	return a
}

// Patch applies an RFC 6902 patch to a node: 404 when the caller may not
// see it, 403 when a path the patch writes or reads is not the caller's to
// touch, then 400 for a patch that does not fit the node. The read, the
// patch and the write happen in one transaction that holds the node's row,
// so concurrent patches serialise instead of overwriting each other.
// allowed gates fields by API version; it may be nil.
func (s *Service) Patch(ctx context.Context, ident string, raw []byte, allowed func(field string) error) (*View, error) {
	return s.PatchWith(ctx, ident, raw, allowed, PatchOptions{})
}

// PatchOptions are the query parameters of a node PATCH.
type PatchOptions struct {
	// ResetInterfaces is Ironic's reset_interfaces: when the patch changes
	// the driver, every interface it does not name goes back to the new
	// driver's default instead of having to fit it.
	ResetInterfaces bool
	// KeepSecrets is Anvil's keep_secrets, for system scope only: a change
	// of a BMC's address, port, system or username, or of the driver,
	// keeps the stored secrets instead of being refused without them
	// (checkBindings). It is audited.
	KeepSecrets bool
}

// PatchWith is Patch with the PATCH's query parameters.
func (s *Service) PatchWith(ctx context.Context, ident string, raw []byte, allowed func(field string) error, opts PatchOptions) (*View, error) {
	ops, err := decodeOps(raw)
	if err != nil {
		return nil, err
	}
	n, err := s.Authorized(ctx, ident, RuleGet)
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, n, ident, append(patchRules(ops), readRulesOf(ops)...)...); err != nil {
		return nil, err
	}
	if p := policies.PrincipalFrom(ctx); opts.KeepSecrets && (p == nil || !p.System) {
		err := errs.Forbidden("keep_secrets=true is for system-scoped callers only: send the BMC password with the change instead")
		s.guard.Done(ctx, RuleUpdate, "node", n.UUID, err, map[string]any{"keep_secrets": true})
		return nil, err
	}
	if err := nonEmpty(ops); err != nil {
		return nil, err
	}
	if err := checkOps(ops); err != nil {
		return nil, err
	}
	if allowed != nil {
		for _, op := range ops {
			if err := allowed(topField(op.Path)); err != nil {
				return nil, err
			}
		}
	}
	var changed []string
	var was, now map[string]any
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		cur, err := LockRow(ctx, tx, n)
		if err != nil {
			return err
		}
		// The owner or lessee may have changed since the check above.
		if cur.Owner != n.Owner || cur.Lessee != n.Lessee {
			if err := s.authorize(ctx, cur, ident, append(append([]string{RuleGet}, patchRules(ops)...), readRulesOf(ops)...)...); err != nil {
				return err
			}
		}
		if cur.ChassisID != nil {
			if cur.Edges.Chassis, err = tx.Chassis.Get(ctx, *cur.ChassisID); err != nil {
				return err
			}
		}
		before := patchDoc(cur)
		seen := before
		if !SeesURLs(policies.PrincipalFrom(ctx)) {
			seen = strippedDoc(before)
		}
		after, err := patchdoc.Apply(seen, raw, "node")
		if err != nil {
			return err
		}
		restoreStripped(seen, before, after)
		changed = diff(before, after)
		was, now = plainChange(before, after, changed)
		if len(changed) == 0 {
			return nil
		}
		if contains(changed, "lessee") {
			if err := leasedLessee(ctx, tx, cur); err != nil {
				return err
			}
		}
		if contains(changed, "instance_uuid") {
			if err := checkInstanceUUID(ctx, tx, cur, after); err != nil {
				return err
			}
		}
		if cur.ConsoleEnabled && contains(changed, "driver") {
			// Ironic's words: the new driver could not stop the console
			// the old one started.
			return errs.Conflict("Node %s can not update the driver while the console is enabled. Please stop the console first.", ident)
		}
		if contains(changed, "owner") && cur.ProvisionState == StateActive && !s.guard.Allowed(ctx, RuleOwnerProvisioned, Target(cur)) {
			return errs.Conflict("Cannot update owner of node \"%s\" while it is in state \"%s\".", cur.UUID, StateActive)
		}
		upd, err := s.validatePatched(cur, after, changed, opts)
		if err != nil {
			return err
		}
		if info, ok := upd.fields["driver_info"].(map[string]any); ok {
			if err := checkWipe(ctx, cur.DriverInfo, info); err != nil {
				return err
			}
			// A value kept under another driver was never checked as a
			// path: a new driver's paths all count as given now.
			drv, _ := after["driver"].(string)
			kept := cur.DriverInfo
			if bmc.Canonical(drv) != bmc.Canonical(cur.Driver) {
				kept = nil
			}
			if err := bmc.CheckPaths(drv, info, kept, systemScope(ctx)); err != nil {
				return fieldError(err)
			}
		}
		if contains(changed, "chassis_uuid") {
			ident, ok := after["chassis_uuid"].(string)
			if !ok && after["chassis_uuid"] != nil {
				return errs.BadRequest("chassis_uuid", "chassis_uuid must be a string or null")
			}
			if upd.fields["chassis_uuid"], err = chassisOf(ctx, tx, &ident); err != nil {
				return err
			}
		}
		if err := applyUpdate(ctx, tx, cur, upd); err != nil {
			return err
		}
		if err := endConsole(ctx, tx, cur, changed); err != nil {
			return err
		}
		if err := dropScreenshot(ctx, tx, cur, changed); err != nil {
			return err
		}
		return recordTenancy(ctx, tx, cur, after, changed)
	})
	if len(changed) > 0 || err != nil {
		detail := map[string]any{"changed": changed, "ops": len(ops)}
		if len(was) > 0 {
			detail["before"], detail["after"] = was, now
		}
		if opts.KeepSecrets {
			detail["keep_secrets"] = true
		}
		s.guard.Done(ctx, RuleUpdate, "node", n.UUID, err, detail)
	}
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, n.UUID)
}

// idleStates are where a node with an allocation may lose its
// instance_uuid outside maintenance: nothing is deployed or running on it
// (Ironic's update_node, allowed_update_states).
var idleStates = map[string]bool{StateEnroll: true, "inspecting": true, "inspect wait": true, StateManageable: true, StateAvailable: true}

// checkInstanceUUID does what Ironic's update_node does with a changed
// instance_uuid: a node's instance is never overwritten by another
// (remove it first), and removing it releases the node's allocation,
// only while the node is idle or in maintenance, so no deployed
// machine is handed to the next allocation.
func checkInstanceUUID(ctx context.Context, tx *ent.Client, cur *ent.Node, after map[string]any) error {
	next, _ := after["instance_uuid"].(string)
	if next != "" {
		if cur.InstanceUUID != nil {
			return errs.Conflict("Node %s is associated with instance %s.", cur.UUID, *cur.InstanceUUID)
		}
		return nil
	}
	a, err := tx.Allocation.Query().Where(allocation.NodeID(cur.ID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !cur.Maintenance && !idleStates[cur.ProvisionState] {
		return errs.Conflict("Node %s with an allocation can not have instance_uuid removed unless it is in one of allowed (%s) states or in maintenance mode. Current state is '%s'.",
			cur.UUID, strings.Join(slices.Sorted(maps.Keys(idleStates)), ", "), cur.ProvisionState)
	}
	return tx.Allocation.DeleteOne(a).Exec(ctx)
}

// endConsole disables the console of a node whose owner or lessee
// changed: the lease it was enabled under has ended, and the conductor
// running it closes it, its client included, on reading this. Ironic
// leaves the console running; a console is a way into the machine, so
// Anvil does not hand it from one project to the next.
func endConsole(ctx context.Context, tx *ent.Client, cur *ent.Node, changed []string) error {
	if !cur.ConsoleEnabled || !contains(changed, "owner") && !contains(changed, "lessee") {
		return nil
	}
	if err := tx.Node.UpdateOneID(cur.ID).SetConsoleEnabled(false).Exec(ctx); err != nil {
		return err
	}
	return history.RecordAll(ctx, tx, []history.Event{{NodeID: cur.ID, Type: "console", User: userOf(ctx),
		Message: "Console disabled: the node's owner or lessee changed"}})
}

// dropScreenshot deletes the console screenshot of a node whose owner or
// lessee changed: it is what the machine showed the project it was
// taken for, and goes with the console (endConsole) rather than to the
// next project.
func dropScreenshot(ctx context.Context, tx *ent.Client, cur *ent.Node, changed []string) error {
	if !contains(changed, "owner") && !contains(changed, "lessee") {
		return nil
	}
	_, err := tx.NodeScreenshot.Delete().Where(nodescreenshot.NodeID(cur.ID)).Exec(ctx)
	return err
}

// recordTenancy writes a history event for each change of owner or lessee,
// so the node's history says who gave it to or took it from a project.
func recordTenancy(ctx context.Context, tx *ent.Client, cur *ent.Node, after map[string]any, changed []string) error {
	var evs []history.Event
	for _, f := range []string{"owner", "lessee"} {
		if !contains(changed, f) {
			continue
		}
		old := cur.Owner
		if f == "lessee" {
			old = cur.Lessee
		}
		now, _ := after[f].(string)
		evs = append(evs, history.Event{NodeID: cur.ID, Type: "tenancy", User: userOf(ctx),
			Message: fmt.Sprintf("%s changed: %s → %s", strings.ToUpper(f[:1])+f[1:], tenancyText(old), tenancyText(now))})
	}
	return history.RecordAll(ctx, tx, evs)
}

// leasedLessee refuses a change of the lessee of a node in an active
// lease (server/leasing) to all but system scope: the lease sets and
// removes the lessee, and a hand change would hand the machine to another
// project mid-lease. A system-scoped change goes through, and the node's
// history says which lease it overrode.
func leasedLessee(ctx context.Context, tx *ent.Client, cur *ent.Node) error {
	l, err := tx.Lease.Query().Where(lease.ResourceUUID(cur.UUID), lease.StatusIn("active", "wait cancel")).First(ctx)
	if ent.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !systemScope(ctx) {
		return errs.Conflict("Node %s is in lease %s of project %s until %s: its lessee follows the lease; only system scope changes it by hand.",
			cur.UUID, l.UUID, l.ProjectID, l.EndTime.UTC().Format(time.RFC3339))
	}
	return history.Record(ctx, tx, history.Event{NodeID: cur.ID, Type: "tenancy", User: userOf(ctx), Severity: history.Warning,
		Message: fmt.Sprintf("Lessee changed by system scope during lease %s of project %s", l.UUID, l.ProjectID)})
}

func tenancyText(project string) string {
	if project == "" {
		return "(none)"
	}
	return project
}

// LockRow takes the node's row for the rest of the transaction and returns
// it as stored now. The UPDATE is the lock on PostgreSQL (a row lock until
// commit) and SQLite (its one writer lock, taken at BEGIN IMMEDIATE); its
// condition keeps a node a conductor holds out of reach.
func LockRow(ctx context.Context, tx *ent.Client, n *ent.Node) (*ent.Node, error) {
	cnt, err := tx.Node.Update().Where(node.ID(n.ID), node.ReservationIsNil()).SetUpdatedAt(time.Now()).Save(ctx)
	if err != nil {
		return nil, err
	}
	cur, err := tx.Node.Get(ctx, n.ID)
	if ent.IsNotFound(err) {
		return nil, notFound(n.UUID)
	}
	if err != nil {
		return nil, err
	}
	if cnt == 0 && cur.Reservation != nil {
		return nil, lockedError(cur)
	}
	return cur, nil
}

// plainChange is the before and after of the changed fields whose values
// are plain (a name, an owner, a flag, a class), for the audit log to show
// the change. Maps and lists are left out: driver_info and instance_info
// may hold credentials, and the others are too big to read as a change.
func plainChange(before, after map[string]any, changed []string) (was, now map[string]any) {
	for _, f := range changed {
		b, a := before[f], after[f]
		if !plain(b) || !plain(a) {
			continue
		}
		if was == nil {
			was, now = map[string]any{}, map[string]any{}
		}
		was[f], now[f] = b, a
	}
	return was, now
}

func plain(v any) bool {
	switch v.(type) {
	case nil, string, bool, float64, int, int64:
		return true
	}
	return false
}

func diff(before, after map[string]any) []string {
	var changed []string
	for f := range fieldRules {
		if !reflect.DeepEqual(patchdoc.Normal(before[f]), patchdoc.Normal(after[f])) {
			changed = append(changed, f)
		}
	}
	for f := range after {
		if _, ok := fieldRules[f]; !ok {
			changed = append(changed, f)
		}
	}
	sort.Strings(changed)
	return changed
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// nodeUpdate is a validated set of field changes.
type nodeUpdate struct {
	fields map[string]any
	// ifaces are the interface types the patch names.
	ifaces []string
}

// interfaceStates are where a node's interfaces may change outside
// maintenance, as Ironic's update_node allows.
var interfaceStates = []string{StateEnroll, "inspecting", "inspect wait", StateManageable, StateAvailable}

// checkFlags applies Ironic's rules for protected, retired and
// maintenance (ironic/conductor/manager.py, update_node): protection is
// for workloads, so only active (or rescue) nodes take it; an available
// node is about to be handed out and cannot be retired; a reason without
// its flag is refused, and clearing a flag clears its reason.
func (u *nodeUpdate) checkFlags(n *ent.Node, after map[string]any) error {
	flag := func(f string, cur bool) bool {
		if b, ok := u.fields[f].(bool); ok {
			return b
		}
		return cur
	}
	protected, retired := flag("protected", n.Protected), flag("retired", n.Retired)
	if b, ok := u.fields["protected"].(bool); ok {
		if !b {
			u.fields["protected_reason"] = (*string)(nil)
		} else if n.ProvisionState != StateActive && n.ProvisionState != "rescue" {
			return errs.Conflict("Node %s can only be made protected in provision states 'active' or 'rescue', the current state is '%s'", n.UUID, n.ProvisionState)
		}
	}
	if r, ok := u.fields["protected_reason"].(*string); ok && r != nil && !protected {
		return errs.BadRequest("protected_reason", "The protected_reason field can only be set when protected is True")
	}
	if b, ok := u.fields["retired"].(bool); ok {
		if !b {
			u.fields["retired_reason"] = (*string)(nil)
		} else if n.ProvisionState == StateAvailable {
			return errs.Conflict("Node %s can not have 'retired' set in provision state 'available', the current state is '%s'", n.UUID, n.ProvisionState)
		}
	}
	if r, ok := u.fields["retired_reason"].(*string); ok && r != nil && !retired {
		return errs.BadRequest("retired_reason", "The retired_reason field can only be set when retired is True")
	}
	return nil
}

// checkInterfaces checks every interface against the node's driver after
// the patch, as Ironic's check_and_update_node_interfaces does: the ones
// the patch names must be the driver's, in a state that allows changing
// them; on a driver change the others must fit the new driver too, unless
// reset_interfaces puts them back to its defaults.
func (u *nodeUpdate) checkInterfaces(n *ent.Node, after map[string]any, driverChanged, reset bool) error {
	if len(u.ifaces) == 0 && !driverChanged {
		return nil
	}
	drv, _ := after["driver"].(string)
	for _, t := range u.ifaces {
		if !slices.Contains(interfaceStates, n.ProvisionState) && !n.Maintenance {
			return errs.Conflict("Node %s can not have %s_interface updated unless it is in one of allowed (%s) states or in maintenance mode. Current state is '%s'.",
				n.UUID, t, strings.Join(interfaceStates, ", "), n.ProvisionState)
		}
	}
	for _, t := range bmc.InterfaceTypes {
		f := t + "_interface"
		impl, named := u.fields[f].(string)
		if !named {
			if !driverChanged {
				continue
			}
			if reset {
				u.fields[f] = ""
				continue
			}
			impl = StoredInterface(n, t)
		}
		if impl == "" {
			continue
		}
		if err := bmc.CheckInterface(drv, t, impl); err != nil {
			return fieldError(err)
		}
	}
	return nil
}

func (s *Service) validatePatched(n *ent.Node, after map[string]any, changed []string, opts PatchOptions) (*nodeUpdate, error) {
	u := &nodeUpdate{fields: map[string]any{}}
	optStr := func(f string) (*string, error) {
		switch v := after[f].(type) {
		case nil:
			return nil, nil
		case string:
			return &v, nil
		}
		return nil, errs.BadRequest(f, "%s must be a string or null", f)
	}
	obj := func(f string) (map[string]any, error) {
		switch v := after[f].(type) {
		case nil:
			return map[string]any{}, nil
		case map[string]any:
			return v, nil
		}
		return nil, errs.BadRequest(f, "%s must be an object", f)
	}
	for _, f := range changed {
		if _, ok := fieldRules[f]; !ok {
			return nil, errs.BadRequest(f, "%s is not a node attribute that can be patched", f)
		}
		switch f {
		case "name", "resource_class", "instance_uuid", "description", "owner", "lessee":
			v, err := optStr(f)
			if err != nil {
				return nil, err
			}
			if v != nil {
				if err := validateStrField(f, *v); err != nil {
					return nil, err
				}
			}
			u.fields[f] = v
		case "conductor_group":
			// Removing the group puts the node back in the default "".
			v, err := optStr(f)
			if err != nil {
				return nil, err
			}
			g, err := ValidateConductorGroup(f, deref(v))
			if err != nil {
				return nil, err
			}
			u.fields[f] = g
		case "driver":
			v, err := optStr(f)
			if err != nil {
				return nil, err
			}
			if v == nil || *v == "" {
				return nil, errs.BadRequest("driver", "driver is mandatory and can not be removed")
			}
			u.fields[f] = *v
		case "driver_info", "properties", "extra", "instance_info":
			v, err := obj(f)
			if err != nil {
				return nil, err
			}
			u.fields[f] = v
		case "network_data":
			v, err := obj(f)
			if err != nil {
				return nil, err
			}
			if err := ValidateNetworkData(v); err != nil {
				return nil, err
			}
			u.fields[f] = v
		case "maintenance", "protected", "retired", "disable_power_off":
			b, err := boolValue(after[f])
			if err != nil {
				return nil, errs.BadRequest(f, "%s must be a boolean, not %v", f, after[f])
			}
			// Removing the flag (baremetal node unset --retired) puts
			// back its default, false, as Ironic does.
			u.fields[f] = b != nil && *b
		case "automated_clean":
			b, err := boolValue(after[f])
			if err != nil {
				return nil, errs.BadRequest(f, "%s must be a boolean or null, not %v", f, after[f])
			}
			u.fields[f] = b
		case "protected_reason", "retired_reason", "shard", "instance_name", "parent_node":
			v, err := optStr(f)
			if err != nil {
				return nil, err
			}
			if v != nil {
				if err := validateStrField(f, *v); err != nil {
					return nil, err
				}
			}
			u.fields[f] = v
		default:
			if t, ok := strings.CutSuffix(f, "_interface"); ok {
				v, err := optStr(f)
				if err != nil {
					return nil, err
				}
				// Removing an interface puts the driver's default back.
				u.fields[f] = deref(v)
				u.ifaces = append(u.ifaces, t)
			}
		}
	}
	if err := u.checkFlags(n, after); err != nil {
		return nil, err
	}
	if err := u.checkInterfaces(n, after, contains(changed, "driver"), opts.ResetInterfaces); err != nil {
		return nil, err
	}
	if contains(changed, "instance_info") {
		info := u.fields["instance_info"].(map[string]any)
		if err := keepSecrets("instance_info", n.InstanceInfo, info, isInstanceSecret); err != nil {
			return nil, err
		}
	}
	// The driver and its info are validated together, whichever changed.
	if contains(changed, "driver") || contains(changed, "driver_info") {
		drv, _ := after["driver"].(string)
		info, _ := after["driver_info"].(map[string]any)
		if info == nil {
			info = map[string]any{}
		}
		if !opts.KeepSecrets {
			if err := checkBindings(n.Driver, drv, n.DriverInfo, info); err != nil {
				return nil, err
			}
		}
		if err := keepSecrets("driver_info", n.DriverInfo, info, bmc.IsSecretKey); err != nil {
			return nil, err
		}
		if err := bmc.ValidateStored(drv, info); err != nil {
			return nil, fieldError(err)
		}
		u.fields["driver_info"] = info
	}
	return u, nil
}

// keepSecrets puts back the stored value of every secret the patch left
// masked: the patch worked on masked values, so "******" under a secret
// key means "unchanged". A masked value under a secret key that held
// nothing before was copied or moved there from elsewhere, and storing it
// would replace a credential with asterisks, so it is refused.
func keepSecrets(field string, old, info map[string]any, secret func(string) bool) error {
	for k, v := range info {
		if s, ok := v.(string); !ok || s != Masked || !secret(k) {
			continue
		}
		ov, ok := old[k]
		if !ok {
			return errs.BadRequest(field+"."+k, "%s.%s is %q, the mask of a secret; send the secret itself", field, k, Masked)
		}
		info[k] = ov
	}
	return nil
}

func validateStrField(f, v string) error {
	switch f {
	case "name":
		return ValidateName(f, v)
	case "owner", "lessee":
		return ValidateProject(f, v)
	case "resource_class":
		if len(v) > 80 {
			return errs.BadRequest(f, "resource_class is longer than 80 characters")
		}
	case "instance_uuid":
		if !IsUUID(v) {
			return errs.BadRequest(f, "instance_uuid %q is not a valid UUID", v)
		}
	case "description", "protected_reason", "retired_reason":
		if len(v) > 4096 {
			return errs.BadRequest(f, "%s is longer than 4096 characters", f)
		}
	case "shard", "instance_name":
		if v == "" || len(v) > 255 {
			return errs.BadRequest(f, "%s must be 1 to 255 characters", f)
		}
	case "parent_node":
		if !IsUUID(v) {
			return errs.BadRequest(f, "parent_node %q is not a node UUID", v)
		}
	}
	return nil
}

// setOrClear writes a nullable column: the value when p is set, NULL when
// it is nil (ent's SetNillable leaves the column alone on nil instead).
func setOrClear[T, R any](p *T, set func(T) R, clear func() R) {
	if p == nil {
		clear()
	} else {
		set(*p)
	}
}

func applyUpdate(ctx context.Context, tx *ent.Client, n *ent.Node, u *nodeUpdate) error {
	upd := tx.Node.UpdateOneID(n.ID)
	for f, v := range u.fields {
		switch f {
		case "name":
			setOrClear(v.(*string), upd.SetName, upd.ClearName)
		case "resource_class":
			setOrClear(v.(*string), upd.SetResourceClass, upd.ClearResourceClass)
		case "instance_uuid":
			if p := v.(*string); p == nil {
				upd.ClearInstanceUUID()
			} else {
				upd.SetInstanceUUID(strings.ToLower(*p))
			}
		case "description":
			setOrClear(v.(*string), upd.SetDescription, upd.ClearDescription)
		case "owner":
			upd.SetOwner(deref(v.(*string)))
		case "lessee":
			upd.SetLessee(deref(v.(*string)))
		case "conductor_group":
			upd.SetConductorGroup(v.(string))
		case "driver":
			upd.SetDriver(v.(string))
		case "driver_info":
			upd.SetDriverInfo(v.(map[string]any))
		case "properties":
			upd.SetProperties(v.(map[string]any))
		case "extra":
			upd.SetExtra(v.(map[string]any))
		case "instance_info":
			upd.SetInstanceInfo(v.(map[string]any))
		case "chassis_uuid":
			setOrClear(v.(*int), upd.SetChassisID, upd.ClearChassisID)
		case "network_data":
			upd.SetNetworkData(v.(map[string]any))
		case "maintenance":
			upd.SetMaintenance(v.(bool))
			if !v.(bool) {
				// As Ironic: leaving maintenance by patch also drops its
				// reason and the fault that caused it.
				upd.ClearMaintenanceReason().ClearFault()
			}
		case "protected":
			upd.SetProtected(v.(bool))
		case "retired":
			upd.SetRetired(v.(bool))
		case "disable_power_off":
			upd.SetDisablePowerOff(v.(bool))
		case "automated_clean":
			setOrClear(v.(*bool), upd.SetAutomatedClean, upd.ClearAutomatedClean)
		case "protected_reason":
			setOrClear(v.(*string), upd.SetProtectedReason, upd.ClearProtectedReason)
		case "retired_reason":
			setOrClear(v.(*string), upd.SetRetiredReason, upd.ClearRetiredReason)
		case "shard":
			setOrClear(v.(*string), upd.SetShard, upd.ClearShard)
		case "instance_name":
			setOrClear(v.(*string), upd.SetInstanceName, upd.ClearInstanceName)
		case "parent_node":
			if p := v.(*string); p == nil {
				upd.ClearParentNode()
			} else {
				upd.SetParentNode(strings.ToLower(*p))
			}
		case "bios_interface":
			upd.SetBiosInterface(v.(string))
		case "boot_interface":
			upd.SetBootInterface(v.(string))
		case "console_interface":
			upd.SetConsoleInterface(v.(string))
		case "deploy_interface":
			upd.SetDeployInterface(v.(string))
		case "firmware_interface":
			upd.SetFirmwareInterface(v.(string))
		case "inspect_interface":
			upd.SetInspectInterface(v.(string))
		case "management_interface":
			upd.SetManagementInterface(v.(string))
		case "network_interface":
			upd.SetNetworkInterface(v.(string))
		case "power_interface":
			upd.SetPowerInterface(v.(string))
		case "raid_interface":
			upd.SetRaidInterface(v.(string))
		case "rescue_interface":
			upd.SetRescueInterface(v.(string))
		case "storage_interface":
			upd.SetStorageInterface(v.(string))
		case "vendor_interface":
			upd.SetVendorInterface(v.(string))
		default:
			return fmt.Errorf("nodes: no writer for field %s", f)
		}
	}
	if err := upd.Exec(ctx); err != nil {
		var name *string
		if p, ok := u.fields["name"].(*string); ok {
			name = p
		}
		return constraintError(err, n.UUID, name)
	}
	return nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
