// Package ramdisk is the server side of Ironic's agent protocol: the
// ramdisk agent (ironic-python-agent) booted on a machine looks its node
// up by MAC address and then heartbeats with its callback URL. Neither
// call carries credentials, as in Ironic; what protects them is the
// node's state (only a node that expects an agent answers), the agent
// networks callers must be in, the agent token (on the boot medium Anvil
// wrote, or else issued once at the first lookup and bound to its
// address) required on every heartbeat, per-address rate limits (in the
// API) and bounded auditing. docs/agent-trust.md tells the whole model.
package ramdisk

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ports"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/urlsafe"
)

// Policy rules, as Ironic names them; their defaults let anyone, since
// the agent has no credentials.
const (
	RuleLookup    = "baremetal:driver:ipa_lookup"
	RuleHeartbeat = "baremetal:node:ipa_heartbeat"
)

// driver_internal_info keys, Ironic's.
const (
	KeyToken             = "agent_secret_token"
	KeyTokenPregenerated = "agent_secret_token_pregenerated"
	KeyURL               = nodes.AgentURLKey
	KeyVersion           = "agent_version"
	KeyLastHeartbeat     = "agent_last_heartbeat"
	KeyVerifyCA          = "agent_verify_ca"
	KeyStatus            = "agent_status"
	KeyStatusMessage     = "agent_status_message"
)

// MaskedToken is what a lookup returns while a token exists: Ironic
// issues a token once and answers later lookups with this unusable value.
const MaskedToken = "******"

// DefaultHeartbeatTimeout is Ironic's [api]ramdisk_heartbeat_timeout, in
// seconds: the agent heartbeats every 30 to 60 % of it.
const DefaultHeartbeatTimeout = 300

// maxVerifyCA bounds the agent's certificate: a self-signed certificate
// is about 1 KiB; a chain of a few is still far below this.
const maxVerifyCA = 16 << 10

// States in which a node expects its agent. Lookup follows Ironic's
// LOOKUP_ALLOWED_STATES plus servicing and service wait, which Ironic
// admits only with fast track, although in-band service steps need the
// agent to find its node (Anvil has no fast track yet). Heartbeats follow
// Ironic's HEARTBEAT_ALLOWED.
var (
	LookupStates = []string{"deploying", "wait call-back", nodes.StateCleaning, nodes.StateCleanWait,
		"inspecting", "inspect wait", "rescuing", "rescue wait", nodes.StateServicing, nodes.StateServiceWait}
	HeartbeatStates = []string{"wait call-back", nodes.StateCleanWait, "rescue wait", "deploying", nodes.StateCleaning,
		"rescuing", "deploy hold", "clean hold", nodes.StateServicing, nodes.StateServiceWait, "service hold"}
)

// FastTrackStates are where an agent left running after cleaning idles
// with fast track on, its heartbeats still recorded so the conductor
// knows it is alive (Ironic's [deploy]fast_track).
var FastTrackStates = []string{nodes.StateAvailable, nodes.StateManageable}

// agentStates are Ironic's AGENT_VALID_STATES for agent_status.
var agentStates = []string{"start", "end", "error"}

// Service answers lookups and heartbeats.
type Service struct {
	db    *store.DB
	guard *guard.Guard
	// HeartbeatTimeout is config.heartbeat_timeout in a lookup's answer.
	HeartbeatTimeout int
	// FastTrack records heartbeats in FastTrackStates too.
	FastTrack bool
	// APIURL is Anvil's API as agents reach it, which iPXE scripts pass
	// them as ipa-api-url (the conductor settles it when it starts).
	APIURL func() string
	// Networks are where agents call from (--agent-networks): lookups,
	// heartbeats, inspection data and iPXE scripts from elsewhere are
	// refused. Empty accepts any address (development).
	Networks []netip.Prefix
	// Discovery lets continue_inspection without the node's token match
	// a node by MAC or BMC address, as Ironic does; off, inspection data
	// needs the token the inspection's boot medium carries.
	Discovery bool
	// Media are the kernel and ramdisk iPXE scripts boot for nodes whose
	// driver_info names none.
	Media Media
	// Metrics counts lookups and heartbeats; nil counts none.
	Metrics *Metrics
	now     func() time.Time
	hb      hbStmts
}

// New returns the service.
func New(db *store.DB, g *guard.Guard) *Service {
	return &Service{db: db, guard: g, HeartbeatTimeout: DefaultHeartbeatTimeout, now: time.Now}
}

// errNotFound is every failed lookup's answer, word for word Ironic's: an
// unknown address, an ambiguous one and a node in the wrong state must
// not be told apart.
func errNotFound() error { return errs.NotFound("Resource could not be found.") }

// errToken is every refused heartbeat's answer for an unknown node or a
// wrong or missing token, Ironic's message for the latter: an
// unauthenticated caller learns nothing about which nodes exist.
func errToken() error {
	return errs.BadRequest("agent_token", "Invalid or missing agent token received.")
}

// Looked is a lookup's answer.
type Looked struct {
	UUID               string
	Properties         map[string]any
	InstanceInfo       map[string]any
	DriverInternalInfo map[string]any
	// Token is the new token, MaskedToken when one was issued before, or
	// "" when the request's version predates tokens.
	Token            string
	HeartbeatTimeout int
	// ManagementInterface is the node's, for config.agent_skip_bmc_detect.
	ManagementInterface string
}

// Lookup finds the node of an agent by its MAC addresses or, when given,
// by UUID, as Ironic's LookupController does. With issue (API 1.62 and
// later) the first lookup of a node without a token issues one, bound to
// source (the caller's address); the token is stored and answered
// exactly once. A node whose boot medium carries its token (Pregenerate)
// has one already, so its lookups never get it.
func (s *Service) Lookup(ctx context.Context, addresses []string, nodeUUID string, issue bool, source string) (_ *Looked, err error) {
	if s.Metrics != nil {
		defer func() { s.Metrics.lookups.count(err) }()
	}
	if err := s.guard.Authorize(ctx, RuleLookup, "node", "", policies.Target{}); err != nil {
		return nil, err
	}
	var macs []string
	for _, a := range addresses {
		// Ironic drops what is not a MAC rather than refusing it.
		if m, err := ports.NormalizeMAC("addresses", strings.TrimSpace(a)); err == nil {
			macs = append(macs, m)
		}
	}
	if len(macs) == 0 && nodeUUID == "" {
		return nil, errs.BadRequest("addresses", "At least one of 'addresses' and 'node_uuid' parameters is required")
	}
	n, err := s.findForLookup(ctx, macs, nodeUUID)
	if err != nil {
		s.failed(ctx, RuleLookup, nodeUUID, err)
		return nil, err
	}
	// instance_info as any reader but a system admin sees it: secrets
	// masked, credentials and signed queries taken out of its URLs.
	out := &Looked{UUID: n.UUID, Properties: n.Properties, InstanceInfo: urlsafe.StripMap(nodes.MaskInstanceInfo(n.InstanceInfo)),
		HeartbeatTimeout: s.HeartbeatTimeout, ManagementInterface: n.ManagementInterface}
	if out.ManagementInterface == "" {
		out.ManagementInterface = bmc.DefaultInterface(n.Driver, "management")
	}
	if out.Properties == nil {
		out.Properties = map[string]any{}
	}
	if issue {
		tok, err := s.issue(ctx, n, source)
		if err != nil {
			return nil, err
		}
		out.Token = tok
	}
	// The node as an anonymous caller may see it, as Ironic's lookup
	// sanitizes it: without the rule, driver_internal_info is redacted.
	if s.guard.Allowed(ctx, nodes.RuleGetInternal, policies.Target{NodeOwner: n.Owner, NodeLessee: n.Lessee}) {
		out.DriverInternalInfo = nodes.MaskSecrets(n.DriverInternalInfo)
		if p := policies.PrincipalFrom(ctx); p == nil || !p.System {
			for _, k := range nodes.AgentAddressKeys {
				delete(out.DriverInternalInfo, k)
			}
		}
	} else {
		out.DriverInternalInfo = map[string]any{"content": nodes.RedactedInternal}
	}
	return out, nil
}

func (s *Service) findForLookup(ctx context.Context, macs []string, nodeUUID string) (*ent.Node, error) {
	q := s.db.Node.Query()
	if nodeUUID != "" {
		q = q.Where(node.UUID(strings.ToLower(nodeUUID)))
	} else {
		// Through the ports' unique address index: a join from nodes
		// would read every node.
		ids, err := s.db.Port.Query().Where(port.AddressIn(macs...)).Unique(true).Select(port.FieldNodeID).Ints(ctx)
		if err != nil {
			return nil, err
		}
		// Addresses of two nodes are ambiguous, as in Ironic.
		if len(ids) != 1 {
			return nil, errNotFound()
		}
		q = q.Where(node.ID(ids[0]))
	}
	n, err := q.Select(node.FieldUUID, node.FieldOwner, node.FieldLessee, node.FieldDriver, node.FieldManagementInterface,
		node.FieldProvisionState, node.FieldProperties, node.FieldInstanceInfo, node.FieldDriverInternalInfo).Only(ctx)
	if ent.IsNotFound(err) || err == nil && !slices.Contains(LookupStates, n.ProvisionState) {
		return nil, errNotFound()
	}
	return n, err
}

// issue stores a new token unless the node has one, in one conditional
// write, so that two agents looking up at once cannot both receive one.
// The token is bound to source, and the node's history says to which.
func (s *Service) issue(ctx context.Context, n *ent.Node, source string) (string, error) {
	tok, err := NewToken()
	if err != nil {
		return "", err
	}
	set := map[string]string{KeyToken: tok}
	if source != "" {
		set[KeyTokenAddress] = source
	}
	patch, _ := json.Marshal(set)
	q := `UPDATE nodes SET driver_internal_info = json_patch(` + sqliteObj + `, ?), updated_at = ?
	WHERE id = ? AND provision_state IN (` + marks(len(LookupStates)) + `)
	AND json_extract(driver_internal_info, '$.` + KeyToken + `') IS NULL`
	if s.db.Dialect == dialect.Postgres {
		q = `UPDATE nodes SET driver_internal_info = ` + pgObj + ` || ?::jsonb, updated_at = ?
	WHERE id = ? AND provision_state IN (` + marks(len(LookupStates)) + `)
	AND driver_internal_info->'` + KeyToken + `' IS NULL`
	}
	args := append([]any{string(patch), s.now(), n.ID}, anys(LookupStates)...)
	cnt, err := s.exec(ctx, q, args...)
	if err != nil {
		return "", err
	}
	if cnt == 0 {
		// Someone else's token, or the node has just left its agent
		// state: either way this caller gets no usable token.
		return MaskedToken, nil
	}
	s.guard.Done(ctx, RuleLookup, "node", n.UUID, nil, map[string]any{"agent_token": "issued"})
	ev := history.Event{NodeID: n.ID, Type: "agent",
		Message: "Issued the agent's token to the first lookup: the boot medium did not carry one; heartbeats must come from that lookup's address"}
	if source != "" {
		// The provisioning network's address, for system scope only.
		ev.Detail = "lookup from " + source
	}
	_ = history.Record(ctx, s.db.Client, ev)
	return tok, nil
}

// NewToken returns a fresh agent token: 256 random bits, URL-safe base64
// (43 characters; the agent ignores tokens shorter than 32).
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Heartbeat is what an agent posts to /v1/heartbeat/{node}; a nil field
// was not sent.
type Heartbeat struct {
	CallbackURL        string
	AgentVersion       *string
	AgentToken         *string
	AgentVerifyCA      *string
	AgentStatus        *string
	AgentStatusMessage *string
	// Source is the address the heartbeat came from, as the clientip
	// middleware resolved it; "" skips the address checks.
	Source string
}

// Heartbeat records an agent's heartbeat: its callback URL, version,
// certificate and status, with the time, in driver_internal_info. What
// the body says is checked before the node is read; an unknown node and
// a wrong token get the same answer; a node whose state expects no
// heartbeat is a conflict.
func (s *Service) Heartbeat(ctx context.Context, ident string, hb Heartbeat) error {
	err := s.guard.Authorize(ctx, RuleHeartbeat, "node", ident, policies.Target{})
	if err == nil {
		if err = s.heartbeat(ctx, ident, hb); err != nil {
			s.failed(ctx, RuleHeartbeat, ident, err)
		}
	}
	if s.Metrics != nil {
		s.Metrics.heartbeats.count(err)
	}
	return err
}

func (s *Service) heartbeat(ctx context.Context, ident string, hb Heartbeat) error {
	if err := checkHeartbeat(&hb); err != nil {
		return err
	}
	// Before the one-write path for a known agent: its cached URL was
	// checked against the source that sent it, so a heartbeat that
	// passes this and matches the cache comes from the same address
	// (and so from the address a lookup bound the token to).
	if err := checkCallbackSource(&hb); err != nil {
		return err
	}
	patch, _ := json.Marshal(heartbeatPatch{URL: hb.CallbackURL, LastHeartbeat: s.now().UTC().Format("2006-01-02T15:04:05.000000"),
		Version: hb.AgentVersion, VerifyCA: hb.AgentVerifyCA, Status: hb.AgentStatus, StatusMessage: hb.AgentStatusMessage})
	if done, err := s.beatAgain(ctx, ident, &hb, patch); done || err != nil {
		return err
	}
	n, err := s.readAgent(ctx, ident)
	if err != nil {
		return err
	}
	if n == nil || n.token == "" || n.token == MaskedToken || subtle.ConstantTimeCompare([]byte(n.token), []byte(*hb.AgentToken)) != 1 {
		if n != nil {
			s.forget(n.uuid)
		}
		return errToken()
	}
	if err := checkTokenAddress(n.tokenAddr, &hb); err != nil {
		return err
	}
	if !slices.Contains(HeartbeatStates, n.state) && !(s.FastTrack && slices.Contains(FastTrackStates, n.state)) {
		// As Ironic's heartbeat: accepted and ignored, so an agent that
		// outlives its step (a node aborted, a state changed under it)
		// keeps calling harmlessly instead of retrying a conflict.
		return nil
	}
	// Ironic refuses a callback URL or a certificate that changes while
	// the agent runs: a different agent would have a different token.
	if n.url != "" && n.url != hb.CallbackURL {
		return errs.BadRequest("callback_url", "Detected change in ramdisk provided \"callback_url\"")
	}
	if n.verifyCA != "" && hb.AgentVerifyCA != nil && strings.TrimSpace(n.verifyCA) != strings.TrimSpace(*hb.AgentVerifyCA) {
		return errs.BadRequest("agent_verify_ca", "Detected change in ramdisk provided \"agent_verify_ca\"")
	}
	// One conditional write: the state still expects the agent and the
	// token is still the one checked, whatever happened since the read.
	cnt, err := s.recordHeartbeat(ctx, n.id, patch, n.token)
	if err != nil {
		return err
	}
	if cnt == 0 {
		return errs.Conflict("Node %s changed while its heartbeat was recorded; retry.", n.uuid)
	}
	kept := *n
	kept.url = hb.CallbackURL
	if hb.AgentVerifyCA != nil {
		kept.verifyCA = *hb.AgentVerifyCA
	}
	s.remember(kept)
	// The agent's first heartbeat tells the conductor where to send
	// commands: audited each time; the routine ones that follow only
	// move agent_last_heartbeat and are not.
	if !n.hadURL {
		detail := map[string]any{}
		if hb.AgentVersion != nil {
			detail[KeyVersion] = *hb.AgentVersion
		}
		s.guard.Done(ctx, RuleHeartbeat, "node", n.uuid, nil, detail)
	}
	return nil
}

// checkHeartbeat validates the body, naming the field at fault.
func checkHeartbeat(hb *Heartbeat) error {
	u, err := url.Parse(hb.CallbackURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return errs.BadRequest("callback_url", "An issue with the supplied \"callback_url\" has been detected: it must be an http or https URL with a host.")
	}
	if len(hb.CallbackURL) > 2048 {
		return errs.BadRequest("callback_url", "callback_url is longer than 2048 characters")
	}
	if hb.AgentToken == nil || *hb.AgentToken == "" {
		return errs.BadRequest("agent_token", "Agent token is required for heartbeat processing.")
	}
	if hb.AgentStatus != nil && !slices.Contains(agentStates, *hb.AgentStatus) {
		return errs.BadRequest("agent_status", "Agent status is invalid. Valid states are %s.", strings.Join(agentStates, ","))
	}
	if hb.AgentVersion == nil && hb.AgentStatus == nil {
		return errs.BadRequest("agent_version", "Agent did not transmit a version, and a version is required. Please update the agent being used.")
	}
	if hb.AgentVersion != nil && len(*hb.AgentVersion) > 255 {
		return errs.BadRequest("agent_version", "agent_version is longer than 255 characters")
	}
	if hb.AgentStatusMessage != nil && len(*hb.AgentStatusMessage) > 4096 {
		return errs.BadRequest("agent_status_message", "agent_status_message is longer than 4096 characters")
	}
	if hb.AgentVerifyCA != nil {
		if err := checkPEM(*hb.AgentVerifyCA); err != nil {
			return errs.BadRequest("agent_verify_ca", "agent_verify_ca %v", err)
		}
	}
	return nil
}

// checkPEM accepts one or more PEM certificates and nothing else.
func checkPEM(s string) error {
	if len(s) > maxVerifyCA {
		return fmt.Errorf("is longer than %d bytes", maxVerifyCA)
	}
	rest, n := []byte(s), 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("holds a %s block; only certificates are accepted", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("holds a certificate that does not parse: %v", err)
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return fmt.Errorf("must be PEM-encoded certificates")
	}
	return nil
}

// AgentKeys are the driver_internal_info keys that name a booted agent:
// its token (and the addresses it is bound to), callback URL and
// certificate.
var AgentKeys = []string{KeyToken, KeyTokenPregenerated, KeyTokenAddress, KeyIPXEFetchedBy, KeyURL, KeyVerifyCA}

// Wipe forgets the node's agent, as Ironic's wipe_token_and_url: its
// token, callback URL and certificate. The conductor calls it when it
// boots the agent and when the agent's work ends, so that a stale token
// can never be used and each boot's lookup issues a fresh one. n's copy
// loses the keys too, for callers that write it back whole.
func Wipe(ctx context.Context, db *store.DB, n *ent.Node) error {
	return RemoveKeys(ctx, db, n, AgentKeys...)
}

// failed audits a refused lookup or heartbeat in aggregate: anyone can
// send them by the thousand, and an agent waiting for its node to reach
// an agent state retries its lookup until it does.
func (s *Service) failed(ctx context.Context, rule, target string, err error) {
	st := errs.Status(err)
	if st >= 500 {
		return
	}
	s.guard.Audit.Aggregate(ctx, audit.Entry{Rule: rule, TargetType: "node", TargetID: target, Result: audit.Failed, Status: st})
}

// A node's driver_internal_info as an object whatever is stored (NULL, or
// something else from an old row), for the in-place updates.
const (
	sqliteObj = `CASE WHEN json_type(driver_internal_info) = 'object' THEN driver_internal_info ELSE '{}' END`
	pgObj     = `(CASE WHEN jsonb_typeof(driver_internal_info) = 'object' THEN driver_internal_info ELSE '{}'::jsonb END)`
)

// exec runs a statement written with ? placeholders on either backend and
// returns the rows it changed.
func (s *Service) exec(ctx context.Context, q string, args ...any) (int64, error) {
	return exec(ctx, s.db, q, args...)
}

func exec(ctx context.Context, db *store.DB, q string, args ...any) (int64, error) {
	if db.Dialect == dialect.Postgres {
		var b strings.Builder
		n := 0
		for _, r := range q {
			if r == '?' {
				n++
				b.WriteString("$" + strconv.Itoa(n))
				continue
			}
			b.WriteRune(r)
		}
		q = b.String()
	}
	res, err := db.SQL.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
