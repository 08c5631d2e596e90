package ramdisk

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"slices"
	"strings"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeinventory"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/ports"
	"github.com/anvilproject/anvil/server/store"
)

// StateInspectWait is where a node waits for its agent's inventory
// (Ironic's "inspect wait").
const StateInspectWait = "inspect wait"

// InspectionCallback is where an agent booted for inspection posts its
// inventory (its ipa-inspection-callback-url), on Anvil's API at apiURL.
func InspectionCallback(apiURL string) string { return apiURL + "/v1/continue_inspection" }

// driver_internal_info keys of in-band inspection.
const (
	// KeyLookupBMC holds the node's BMC addresses (the address of its
	// driver_info and what its name resolves to) while it waits for an
	// inventory, so that an inventory's bmc_address finds the node: a
	// machine inspected for the first time has no ports to find it by.
	// Ironic's LOOKUP_CACHE_FIELD.
	KeyLookupBMC = "lookup_bmc_addresses"
	// KeyInspectionReceived is set when the node's inventory has been
	// stored, for the conductor that waits for it.
	KeyInspectionReceived = "inspection_data_received"
)

// Inspection is what an agent posts to /v1/continue_inspection: the
// inventory, and the rest of its data (Ironic's plugin data).
type Inspection struct {
	MACs     []string // the inventory's interfaces' MAC addresses
	BMC      []string // its bmc_address and bmc_v6address
	NodeUUID string   // the request's node_uuid, if any
	// Token is the request's agent_token: the node's token, which the
	// inspection's boot medium put in the agent's callback URL.
	Token      string
	Inventory  map[string]any
	PluginData map[string]any
}

// ContinueInspection finds the node an inventory is for and stores it
// for the conductor. The node is the one in inspect wait whose agent
// token the request carries (node_uuid and the MACs of its ports, when
// given, must agree); without a token, only with discovery on, the node
// Ironic's lookup_node finds (node_uuid, the MACs of its ports, the BMC
// addresses of nodes waiting for an inventory: all that is given must
// agree). Every other outcome is the same 404, which tells the caller
// nothing, and changes nothing. It returns the node's UUID to a caller
// with the token only: to anyone else a UUID is a handle to attack.
func (s *Service) ContinueInspection(ctx context.Context, in Inspection) (string, error) {
	var n *ent.Node
	var err error
	switch {
	case in.Token != "":
		n, err = s.findByToken(ctx, in)
	case s.Discovery:
		n, err = s.findForInspection(ctx, in)
	default:
		err = errNotFound()
	}
	if err != nil {
		s.failed(ctx, RuleContinueInspection, in.NodeUUID, err)
		return "", err
	}
	// The inventory first, then the mark the conductor waits for, so
	// whoever sees the mark finds the inventory.
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		if _, err := tx.NodeInventory.Delete().Where(nodeinventory.NodeID(n.ID)).Exec(ctx); err != nil {
			return err
		}
		return tx.NodeInventory.Create().SetNodeID(n.ID).SetInventory(in.Inventory).SetPluginData(in.PluginData).Exec(ctx)
	})
	if err != nil {
		return "", err
	}
	patch, _ := json.Marshal(map[string]any{KeyInspectionReceived: s.now().UTC().Format("2006-01-02T15:04:05.000000Z")})
	q := `UPDATE nodes SET driver_internal_info = json_patch(` + sqliteObj + `, ?), updated_at = ? WHERE id = ? AND provision_state = ?`
	if s.db.Dialect == dialect.Postgres {
		q = `UPDATE nodes SET driver_internal_info = ` + pgObj + ` || ?::jsonb, updated_at = ? WHERE id = ? AND provision_state = ?`
	}
	cnt, err := s.exec(ctx, q, string(patch), s.now(), n.ID, StateInspectWait)
	if err != nil {
		return "", err
	}
	if cnt == 0 {
		// It stopped waiting (a timeout) while the inventory was stored.
		return "", errNotFound()
	}
	s.guard.Done(ctx, RuleContinueInspection, "node", n.UUID, nil, map[string]any{"inventory": "received"})
	if in.Token == "" {
		return "", nil
	}
	return n.UUID, nil
}

// findByToken finds the node in inspect wait whose agent token is
// in.Token; what else the request names must agree with it.
func (s *Service) findByToken(ctx context.Context, in Inspection) (*ent.Node, error) {
	waiting, err := s.db.Node.Query().Where(node.ProvisionState(StateInspectWait)).
		Select(node.FieldID, node.FieldUUID, node.FieldProvisionState, node.FieldDriverInternalInfo).All(ctx)
	if err != nil {
		return nil, err
	}
	var n *ent.Node
	for _, w := range waiting {
		tok, _ := w.DriverInternalInfo[KeyToken].(string)
		if tok != "" && tok != MaskedToken && subtle.ConstantTimeCompare([]byte(tok), []byte(in.Token)) == 1 {
			n = w
		}
	}
	if n == nil || in.NodeUUID != "" && !strings.EqualFold(in.NodeUUID, n.UUID) {
		return nil, errNotFound()
	}
	// The inventory's MACs may name no node yet (a first inspection)
	// but not another one.
	byMAC, err := s.findForInspection(ctx, Inspection{MACs: in.MACs})
	switch {
	case err == nil && byMAC.ID != n.ID:
		return nil, errNotFound()
	case err != nil && errs.Status(err) != 404:
		return nil, err
	}
	return n, nil
}

// RuleContinueInspection governs the inspection callback, as Ironic
// names it.
const RuleContinueInspection = "baremetal:driver:ipa_continue_inspection"

func (s *Service) findForInspection(ctx context.Context, in Inspection) (*ent.Node, error) {
	var found []int
	if in.NodeUUID != "" {
		id, err := s.db.Node.Query().Where(node.UUID(strings.ToLower(in.NodeUUID))).OnlyID(ctx)
		if ent.IsNotFound(err) {
			return nil, errNotFound()
		} else if err != nil {
			return nil, err
		}
		found = append(found, id)
	}
	var macs []string
	for _, a := range in.MACs {
		if m, err := ports.NormalizeMAC("mac_address", strings.TrimSpace(a)); err == nil {
			macs = append(macs, m)
		}
	}
	if len(macs) > 0 {
		ids, err := s.db.Port.Query().Where(port.AddressIn(macs...)).Unique(true).Select(port.FieldNodeID).Ints(ctx)
		if err != nil {
			return nil, err
		}
		// MACs of two nodes are ambiguous, as in Ironic.
		if len(ids) > 1 {
			return nil, errNotFound()
		}
		found = append(found, ids...)
	}
	var bmcs []string
	for _, b := range in.BMC {
		// The agent reports "0.0.0.0" or "::/0" for a BMC it cannot read.
		if b = strings.TrimSpace(b); b != "" && b != "0.0.0.0" && b != "::/0" && b != "::" {
			bmcs = append(bmcs, strings.ToLower(b))
		}
	}
	if len(bmcs) > 0 {
		waiting, err := s.db.Node.Query().Where(node.ProvisionState(StateInspectWait)).
			Select(node.FieldID, node.FieldDriverInternalInfo).All(ctx)
		if err != nil {
			return nil, err
		}
		var byBMC []int
		for _, w := range waiting {
			addrs, _ := w.DriverInternalInfo[KeyLookupBMC].([]any)
			if slices.ContainsFunc(addrs, func(a any) bool { s, _ := a.(string); return slices.Contains(bmcs, strings.ToLower(s)) }) {
				byBMC = append(byBMC, w.ID)
			}
		}
		// Several machines behind one BMC address (a chassis manager,
		// a simulator) are found only when one of them waits.
		if len(byBMC) == 1 {
			found = append(found, byBMC[0])
		}
	}
	if len(found) == 0 {
		return nil, errNotFound()
	}
	for _, id := range found[1:] {
		if id != found[0] {
			return nil, errNotFound()
		}
	}
	n, err := s.db.Node.Query().Where(node.ID(found[0])).Select(node.FieldUUID, node.FieldProvisionState).Only(ctx)
	if ent.IsNotFound(err) || err == nil && n.ProvisionState != StateInspectWait {
		return nil, errNotFound()
	}
	return n, err
}

// RemoveKeys removes keys from the node's driver_internal_info in one
// statement, whatever else writes it meanwhile (a lookup issuing a
// token); n's copy loses them too.
func RemoveKeys(ctx context.Context, db *store.DB, n *ent.Node, keys ...string) error {
	paths := make([]string, len(keys))
	for i, k := range keys {
		paths[i] = "'$." + k + "'"
	}
	q := `UPDATE nodes SET driver_internal_info = json_remove(` + sqliteObj + `, ` + strings.Join(paths, ", ") + `) WHERE id = ?`
	if db.Dialect == dialect.Postgres {
		q = `UPDATE nodes SET driver_internal_info = ` + pgObj + ` - '{` + strings.Join(keys, ",") + `}'::text[] WHERE id = ?`
	}
	if _, err := exec(ctx, db, q, n.ID); err != nil {
		return err
	}
	for _, k := range keys {
		delete(n.DriverInternalInfo, k)
	}
	return nil
}
