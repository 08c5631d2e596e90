// Package volume serves Ironic's volume connectors and targets: how a node
// reaches remote storage and which volumes it boots from. They are data
// with Ironic's validation and RBAC; Anvil has no storage interface that
// acts on them. Access follows the record's node: a caller who may not
// see the node gets 404 for its records, as for the node itself.
package volume

import (
	"context"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/server/store"
)

// Rules, as Ironic names them.
const (
	RuleGet            = "baremetal:volume:get"
	RuleList           = "baremetal:volume:list"
	RuleListAll        = "baremetal:volume:list_all"
	RuleCreate         = "baremetal:volume:create"
	RuleUpdate         = "baremetal:volume:update"
	RuleDelete         = "baremetal:volume:delete"
	RuleViewProperties = "baremetal:volume:view_target_properties"
)

// RedactedProperties stands in for a target's properties when the caller
// may not read them, word for word as Ironic writes it.
const RedactedProperties = "** Value redacted: Requires permission baremetal:volume:view_target_properties access. Permission denied. **"

// ConnectorTypes are the connector types Ironic documents.
var ConnectorTypes = []string{"iqn", "ip", "mac", "wwnn", "wwpn", "port", "portgroup"}

// Service serves volume connectors and targets.
type Service struct {
	db    *store.DB
	guard *guard.Guard
	nodes *nodes.Service
}

// New returns the volume service.
func New(db *store.DB, g *guard.Guard, n *nodes.Service) *Service {
	return &Service{db: db, guard: g, nodes: n}
}

// nodeOf loads the node a record hangs on, for policy targets.
func (s *Service) nodeOf(ctx context.Context, id int) (*ent.Node, error) {
	return s.db.Node.Get(ctx, id)
}

// authorizeOn checks rule on a record of node n: 404 (notFound) when the
// caller may not see the node, 403 when it may see but not do this.
func (s *Service) authorizeOn(ctx context.Context, n *ent.Node, rule, kind, id string, notFound error) error {
	t := nodes.Target(n)
	if !s.guard.Allowed(ctx, nodes.RuleGet, t) {
		_ = s.guard.Authorize(ctx, nodes.RuleGet, kind, id, t) // audits the denial
		return notFound
	}
	return s.guard.Authorize(ctx, rule, kind, id, t)
}

// createNode resolves the node_uuid of a new record as Ironic does: the
// create rule is checked against the node's owner and lessee, or against
// nobody when the caller may not see the node (so a project learns
// nothing from the answer), and only then is an unknown node a 400.
func (s *Service) createNode(ctx context.Context, kind, ident string) (*ent.Node, error) {
	if !nodes.IsUUID(ident) {
		return nil, errs.BadRequest("node_uuid", "Expected a UUID for node_uuid, but received %q.", ident)
	}
	n, err := s.nodes.Lookup(ctx, ident)
	if err != nil && errs.Status(err) != 404 {
		return nil, err
	}
	t := policies.Target{}
	if n != nil && s.guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n)) {
		t = nodes.Target(n)
	} else {
		n = nil
	}
	if err := s.guard.Authorize(ctx, RuleCreate, kind, "", t); err != nil {
		return nil, err
	}
	if n == nil {
		return nil, errs.BadRequest("node_uuid", "Invalid value %s for node_uuid: Node %s could not be found.", ident, ident)
	}
	return n, nil
}

// relink checks a PATCH moving a record to another node, as Ironic's
// authorize_node_link: the new node must be one the caller sees, owned
// by the same project; anything else reads as an invalid value.
func (s *Service) relink(ctx context.Context, from *ent.Node, ident string) (*ent.Node, error) {
	bad := errs.BadRequest("node_uuid", "Unable to apply the requested node_uuid '%s'. Requested value was invalid.", ident)
	if !nodes.IsUUID(ident) {
		return nil, errs.BadRequest("node_uuid", "Expected a UUID for node_uuid, but received %s.", ident)
	}
	n, err := s.nodes.Lookup(ctx, ident)
	if errs.Status(err) == 404 {
		return nil, bad
	}
	if err != nil {
		return nil, err
	}
	if !s.guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n)) || n.Owner != from.Owner {
		return nil, bad
	}
	return n, nil
}

// lockNode takes the node's row for the rest of the transaction, as
// Ironic's conductor takes the node's lock before changing its volume
// records, and checks the node's state allows the action: a change only
// while the node is powered off; a deletion also in enroll, manageable
// or adopt failed.
func lockNode(ctx context.Context, tx *ent.Client, n *ent.Node, action string, deleting bool) error {
	cur, err := nodes.LockRow(ctx, tx, n)
	if err != nil {
		return err
	}
	if deleting && slices.Contains([]string{nodes.StateManageable, nodes.StateEnroll, "adopt failed"}, cur.ProvisionState) {
		return nil
	}
	if cur.PowerState == nil || *cur.PowerState != bmc.PowerOff {
		state := "None"
		if cur.PowerState != nil {
			state = *cur.PowerState
		}
		return errs.BadRequest("node_uuid", "The requested action \"%s\" can not be performed on node \"%s\" while it is in state \"%s\".", action, cur.UUID, state)
	}
	return nil
}

// listNode resolves a list's node (from ?node= or the path): a node the
// caller may not see is a 404, exactly as one that does not exist.
func (s *Service) listNode(ctx context.Context, ident string) (*ent.Node, error) {
	n, err := s.nodes.Lookup(ctx, ident)
	if err != nil {
		return nil, err
	}
	if !s.guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n)) {
		return nil, errs.NotFound("Node %s could not be found.", ident)
	}
	return n, nil
}

// listScope decides list_all versus list once: nil for every record, else
// the caller's project, whose nodes' records it may list.
func (s *Service) listScope(ctx context.Context, kind string) (*string, error) {
	if s.guard.Allowed(ctx, RuleListAll, policies.Target{}) {
		return nil, nil
	}
	p := policies.PrincipalFrom(ctx)
	if p == nil || p.Project == "" {
		return nil, s.guard.Authorize(ctx, RuleListAll, kind, "", policies.Target{})
	}
	if err := s.guard.Authorize(ctx, RuleList, kind, "", policies.Target{}); err != nil {
		return nil, err
	}
	return &p.Project, nil
}

func newUUID(in *string) (string, error) {
	if in == nil || *in == "" {
		return uuid.NewString(), nil
	}
	if !nodes.IsUUID(*in) {
		return "", errs.BadRequest("uuid", "uuid %q is not a valid UUID", *in)
	}
	return strings.ToLower(*in), nil
}

func checkExtra(extra map[string]any) error {
	if len(extra) > 100 {
		return errs.BadRequest("extra", "extra has more than 100 keys")
	}
	return nil
}

// maskProperties hides secret-looking values of a target's properties,
// as Ironic masks them with mask_dict_password.
func maskProperties(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if runbooks.IsSecret(k) {
			v = runbooks.Masked
		}
		out[k] = v
	}
	return out
}
