package ramdisk

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"slices"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// driver_internal_info keys of the agent's trust (docs/agent-trust.md).
const (
	// KeyTokenAddress is the address a lookup issued the token to: the
	// agent's heartbeats must come from it.
	KeyTokenAddress = nodes.AgentTokenAddressKey
	// KeyIPXEFetchedBy is the address that first fetched the iPXE script
	// carrying a pregenerated token: only it gets the token again.
	KeyIPXEFetchedBy = nodes.AgentIPXEFetchedBy
)

// errSource refuses an agent call from outside the agent networks. It
// names no node: the caller learns only that its address is not one an
// agent may call from.
func errSource() error {
	return errs.Forbidden("Agent calls are accepted only from the agent networks (--agent-networks).")
}

// Admit tells whether an agent call (lookup, heartbeat, inspection data,
// an iPXE script) from source may be answered: any source when no agent
// networks are set (development), else only one inside them. A refusal
// is audited in aggregate, as other refused agent calls are.
func (s *Service) Admit(ctx context.Context, rule, source string) error {
	if len(s.Networks) == 0 {
		return nil
	}
	if a, err := netip.ParseAddr(source); err == nil {
		a = a.Unmap()
		if slices.ContainsFunc(s.Networks, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return nil
		}
	}
	err := errSource()
	s.failed(ctx, rule, "", err)
	return err
}

// checkCallbackSource refuses a callback URL whose host is not the
// heartbeat's source address: the conductor sends the agent's commands
// (and with them a config drive, image credentials, a rescue password)
// to that URL, so it must be the machine that is calling, not an address
// the caller names. An empty source (a caller inside the process) is
// not checked.
func checkCallbackSource(hb *Heartbeat) error {
	if hb.Source == "" {
		return nil
	}
	u, _ := url.Parse(hb.CallbackURL)
	host, err := netip.ParseAddr(u.Hostname())
	src, serr := netip.ParseAddr(hb.Source)
	if err != nil || serr != nil || host.Unmap() != src.Unmap() {
		return errs.BadRequest("callback_url", "callback_url's host must be the address the heartbeat comes from (%s), as an IP address", hb.Source)
	}
	return nil
}

// checkTokenAddress refuses, with the answer a wrong token gets, a
// heartbeat from an address other than the one a lookup issued the
// token to: a token read off the wire or a log is no use elsewhere.
func checkTokenAddress(bound string, hb *Heartbeat) error {
	if bound == "" || hb.Source == "" {
		return nil
	}
	a, err := netip.ParseAddr(bound)
	src, serr := netip.ParseAddr(hb.Source)
	if err != nil || serr != nil || a.Unmap() != src.Unmap() {
		return errToken()
	}
	return nil
}

// Pregenerate stores a new agent token for a boot from a medium Anvil
// writes (an ISO it builds, its iPXE script), marked pregenerated as
// Ironic's agent_secret_token_pregenerated: the medium carries the token
// (ipa-agent-token), so no lookup ever issues one for this boot. A token
// a lookup got meanwhile (the node may already be in a state that takes
// lookups) is replaced, and the address it was bound to forgotten. n's
// copy takes the new one, for the medium's kernel parameters.
func Pregenerate(ctx context.Context, db *store.DB, n *ent.Node) (string, error) {
	tok, err := NewToken()
	if err != nil {
		return "", err
	}
	patch, _ := json.Marshal(map[string]any{KeyToken: tok, KeyTokenPregenerated: true})
	q := `UPDATE nodes SET driver_internal_info = json_patch(json_remove(` + sqliteObj + `, '$.` + KeyTokenAddress + `', '$.` + KeyIPXEFetchedBy + `'), ?) WHERE id = ?`
	if db.Dialect == dialect.Postgres {
		q = `UPDATE nodes SET driver_internal_info = (` + pgObj + ` - '{` + KeyTokenAddress + `,` + KeyIPXEFetchedBy + `}'::text[]) || ?::jsonb WHERE id = ?`
	}
	if _, err := exec(ctx, db, q, string(patch), n.ID); err != nil {
		return "", err
	}
	if n.DriverInternalInfo == nil {
		n.DriverInternalInfo = map[string]any{}
	}
	n.DriverInternalInfo[KeyToken], n.DriverInternalInfo[KeyTokenPregenerated] = tok, true
	delete(n.DriverInternalInfo, KeyTokenAddress)
	delete(n.DriverInternalInfo, KeyIPXEFetchedBy)
	return tok, nil
}

// MediumToken is the token a medium Anvil writes for n carries: its
// pregenerated token, or "" when the boot has none (the agent then gets
// it from its lookup).
func MediumToken(n *ent.Node) string {
	tok, _ := n.DriverInternalInfo[KeyToken].(string)
	if n.DriverInternalInfo[KeyTokenPregenerated] != true || tok == MaskedToken {
		return ""
	}
	return tok
}

// InspectionCallbackFor is the ipa-inspection-callback-url of n's
// medium: with a pregenerated token, the token rides in its query, since
// the agent posts its inventory to that URL as it is and sends no token
// of its own (ironic-python-agent's inspector); continue_inspection
// checks it.
func InspectionCallbackFor(apiURL string, n *ent.Node) string {
	u := InspectionCallback(apiURL)
	if tok := MediumToken(n); tok != "" {
		u += "?agent_token=" + tok
	}
	return u
}

// bindIPXE decides whether the iPXE script with n's pregenerated token
// goes to source: the first fetch binds the script to its address, and
// later fetches from that address (iPXE's retries, a machine reset in
// its firmware) get the same token; another address gets the script
// that boots the local disk, and the node's history says so.
func (s *Service) bindIPXE(ctx context.Context, n *ent.Node, source string) (bool, error) {
	patch, _ := json.Marshal(map[string]string{KeyIPXEFetchedBy: source})
	q := `UPDATE nodes SET driver_internal_info = json_patch(` + sqliteObj + `, ?)
	WHERE id = ? AND json_extract(driver_internal_info, '$.` + KeyIPXEFetchedBy + `') IS NULL
	AND json_extract(driver_internal_info, '$.` + KeyToken + `') = ?`
	if s.db.Dialect == dialect.Postgres {
		q = `UPDATE nodes SET driver_internal_info = ` + pgObj + ` || ?::jsonb
	WHERE id = ? AND driver_internal_info->'` + KeyIPXEFetchedBy + `' IS NULL
	AND driver_internal_info->>'` + KeyToken + `' = ?`
	}
	tok := MediumToken(n)
	if _, err := s.exec(ctx, q, string(patch), n.ID, tok); err != nil {
		return false, err
	}
	cur, err := s.db.Node.Query().Where(node.ID(n.ID)).Select(node.FieldDriverInternalInfo).Only(ctx)
	if err != nil {
		return false, err
	}
	by, _ := cur.DriverInternalInfo[KeyIPXEFetchedBy].(string)
	if cur.DriverInternalInfo[KeyToken] != tok {
		// A new boot's token replaced it meanwhile: the next fetch
		// reads that one.
		return false, nil
	}
	if by == source {
		return true, nil
	}
	_ = history.Record(ctx, s.db.Client, history.Event{NodeID: n.ID, Type: "agent", Severity: history.Warning,
		Message: "Refused the iPXE script with the agent's token to a second address: the first fetch took it",
		Detail:  fmt.Sprintf("first fetched by %s; refused to %s", by, source)})
	return false, nil
}
