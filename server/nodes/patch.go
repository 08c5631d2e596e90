package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
)

// fieldRules is what a JSON patch may change and the rule guarding each
// field, as Ironic splits them. Fields with the generic rule only are
// guarded by baremetal:node:update alone.
var fieldRules = map[string]string{
	"name":           "baremetal:node:update:name",
	"driver":         "baremetal:node:update:driver_interfaces",
	"driver_info":    "baremetal:node:update:driver_info",
	"properties":     "baremetal:node:update:properties",
	"instance_uuid":  "baremetal:node:update:instance_uuid",
	"owner":          "baremetal:node:update:owner",
	"lessee":         "baremetal:node:update:lessee",
	"extra":          RuleUpdateExtra,
	"instance_info":  RuleUpdateInstInfo,
	"resource_class": RuleUpdate,
	"description":    RuleUpdate,
}

// readOnly are node fields that exist but only Anvil changes.
var readOnly = map[string]bool{
	"uuid": true, "id": true, "created_at": true, "updated_at": true, "power_state": true,
	"target_power_state": true, "provision_state": true, "target_provision_state": true,
	"last_error": true, "maintenance": true, "maintenance_reason": true, "reservation": true,
	"clean_step": true, "service_step": true, "driver_internal_info": true, "traits": true,
	"provision_updated_at": true, "links": true, "allocation_uuid": true,
}

// PatchOp is the part of a JSON-patch operation the service validates
// before applying the patch through the library.
type PatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
	From  string          `json:"from,omitempty"`
}

// ParsePatch decodes an RFC 6902 document and checks each operation's
// shape and target field, naming the offending path on error.
func ParsePatch(raw []byte) ([]PatchOp, error) {
	var ops []PatchOp
	if err := json.Unmarshal(raw, &ops); err != nil {
		return nil, errs.BadRequest("patch", "the body must be a JSON patch: a list of {op, path, value} objects (%v)", err)
	}
	if len(ops) == 0 {
		return nil, errs.BadRequest("patch", "the patch is empty")
	}
	for i, op := range ops {
		switch op.Op {
		case "add", "replace", "test":
			if op.Value == nil {
				return nil, errs.BadRequest("patch", "operation %d (%s %s) needs a value", i, op.Op, op.Path)
			}
		case "remove":
		case "move", "copy":
			if _, err := PatchField(op.From); err != nil {
				return nil, err
			}
		default:
			return nil, errs.BadRequest("patch", "operation %d has op %q; use add, replace, remove, move, copy or test", i, op.Op)
		}
		if _, err := PatchField(op.Path); err != nil {
			return nil, err
		}
	}
	return ops, nil
}

// PatchField returns the top-level node field a patch path touches, or an
// error if that field cannot be patched.
func PatchField(path string) (string, error) {
	if !strings.HasPrefix(path, "/") || len(path) < 2 {
		return "", errs.BadRequest("patch", "path %q is not a JSON pointer such as /extra/foo", path)
	}
	f, _, _ := strings.Cut(path[1:], "/")
	if readOnly[f] {
		return "", errs.BadRequest(f, "'/%s' is an internal attribute and can not be updated", f)
	}
	if _, ok := fieldRules[f]; !ok {
		return "", errs.BadRequest(f, "%s is not a node attribute that can be patched", path)
	}
	return f, nil
}

// patchDoc is the node as the patch sees it: the real values, not masked
// ones, so untouched secrets survive a patch of their neighbours.
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
	return map[string]any{
		"name": str(n.Name), "driver": n.Driver, "driver_info": cloneMap(n.DriverInfo),
		"properties": cloneMap(n.Properties), "extra": cloneMap(n.Extra),
		"instance_info": cloneMap(n.InstanceInfo), "owner": proj(n.Owner), "lessee": proj(n.Lessee),
		"resource_class": str(n.ResourceClass), "instance_uuid": str(n.InstanceUUID),
		"description": str(n.Description),
	}
}

// Patch applies an RFC 6902 patch to a node. Every changed field is
// checked against its own rule before anything is written, and the write
// only happens if no conductor has locked the node meanwhile.
func (s *Service) Patch(ctx context.Context, ident string, raw []byte) (*View, error) {
	ops, err := ParsePatch(raw)
	if err != nil {
		return nil, err
	}
	n, err := s.Authorized(ctx, ident, RuleGet)
	if err != nil {
		return nil, err
	}
	before := patchDoc(n)
	after, err := applyPatch(before, raw)
	if err != nil {
		return nil, err
	}
	changed := diff(before, after)
	if len(changed) == 0 {
		return s.Get(ctx, n.UUID)
	}
	rules := []string{}
	generic := false
	for _, f := range changed {
		r := fieldRules[f]
		if r != RuleUpdateExtra && r != RuleUpdateInstInfo {
			generic = true
		}
		if r != RuleUpdate {
			rules = append(rules, r)
		}
	}
	if generic {
		rules = append([]string{RuleUpdate}, rules...)
	}
	if contains(changed, "owner") && n.ProvisionState == StateActive {
		rules = append(rules, RuleOwnerProvisioned)
	}
	if err := s.authorize(ctx, n, ident, rules...); err != nil {
		return nil, err
	}
	detail := map[string]any{"changed": changed, "ops": len(ops)}
	upd, err := s.validatePatched(n, after, changed)
	if err == nil {
		err = s.applyUpdate(ctx, n, upd)
	}
	s.guard.Done(ctx, RuleUpdate, "node", n.UUID, err, detail)
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, n.UUID)
}

func applyPatch(doc map[string]any, raw []byte) (map[string]any, error) {
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, errs.BadRequest("patch", "invalid JSON patch: %v", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	out, err := p.Apply(b)
	if err != nil {
		return nil, errs.BadRequest("patch", "the patch cannot be applied: %v", err)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, errs.BadRequest("patch", "the patched node is not an object: %v", err)
	}
	return res, nil
}

func diff(before, after map[string]any) []string {
	var changed []string
	for f := range fieldRules {
		if !reflect.DeepEqual(normal(before[f]), normal(after[f])) {
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

// normal makes values from Go and from decoded JSON comparable.
func normal(v any) any {
	b, _ := json.Marshal(v)
	var out any
	json.Unmarshal(b, &out)
	return out
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
}

func (s *Service) validatePatched(n *ent.Node, after map[string]any, changed []string) (*nodeUpdate, error) {
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
		}
	}
	// The driver and its info are validated together, whichever changed.
	if contains(changed, "driver") || contains(changed, "driver_info") {
		drv, _ := after["driver"].(string)
		info, _ := after["driver_info"].(map[string]any)
		if info == nil {
			info = map[string]any{}
		}
		keepSecrets(n.DriverInfo, info)
		if err := bmc.Validate(drv, info); err != nil {
			return nil, fieldError(err)
		}
		u.fields["driver_info"] = info
	}
	return u, nil
}

// keepSecrets restores secret values a client sent back masked, so that a
// GET-modify-PUT round trip never stores "******" as a password.
func keepSecrets(old, info map[string]any) {
	for k, v := range info {
		if s, ok := v.(string); ok && s == Masked && bmc.IsSecretKey(k) {
			if ov, ok := old[k]; ok {
				info[k] = ov
			}
		}
	}
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
	case "description":
		if len(v) > 4096 {
			return errs.BadRequest(f, "description is longer than 4096 characters")
		}
	}
	return nil
}

func (s *Service) applyUpdate(ctx context.Context, n *ent.Node, u *nodeUpdate) error {
	upd := s.db.Node.Update().Where(node.ID(n.ID), node.ReservationIsNil()).SetUpdatedAt(time.Now())
	for f, v := range u.fields {
		switch f {
		case "name":
			if p := v.(*string); p == nil {
				upd.ClearName()
			} else {
				upd.SetName(*p)
			}
		case "resource_class":
			if p := v.(*string); p == nil {
				upd.ClearResourceClass()
			} else {
				upd.SetResourceClass(*p)
			}
		case "instance_uuid":
			if p := v.(*string); p == nil {
				upd.ClearInstanceUUID()
			} else {
				upd.SetInstanceUUID(strings.ToLower(*p))
			}
		case "description":
			if p := v.(*string); p == nil {
				upd.ClearDescription()
			} else {
				upd.SetDescription(*p)
			}
		case "owner":
			upd.SetOwner(deref(v.(*string)))
		case "lessee":
			upd.SetLessee(deref(v.(*string)))
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
		default:
			return fmt.Errorf("nodes: no writer for field %s", f)
		}
	}
	cnt, err := upd.Save(ctx)
	if err != nil {
		var name *string
		if p, ok := u.fields["name"].(*string); ok {
			name = p
		}
		return constraintError(err, n.UUID, name)
	}
	if cnt == 0 {
		cur, err := lookup(ctx, s.db.Client, n.UUID)
		if err == nil && cur.Reservation != nil {
			return lockedError(cur)
		}
		return errs.Conflict("Node %s changed while being updated; retry", n.UUID)
	}
	return nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
