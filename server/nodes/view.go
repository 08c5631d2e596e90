package nodes

import (
	"context"
	"regexp"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/urlsafe"
)

// Masked replaces secret values; nobody, system admins included, reads a
// BMC password back.
const Masked = "******"

// What stands in for a field the caller's policy does not grant, word for
// word as Ironic writes it (ironic/api/controllers/v1/node.py,
// node_sanitize): the dict fields become a dict with one "content" key,
// the string fields the sentence itself, whether the field is set or not.
const (
	RedactedDriverInfo  = "** Redacted - requires baremetal:node:get:driver_info permission. **"
	RedactedInternal    = "** Redacted - Requires baremetal:node:get:driver_internal_info permission. **"
	RedactedReservation = "** Redacted - requires baremetal:node:get:reservation permission. **"
	RedactedLastError   = "** Value Redacted - Requires baremetal:node:get:last_error permission. **"
)

// AgentURLKey is the driver_internal_info key of the ramdisk agent's
// callback URL (package ramdisk writes it).
const AgentURLKey = "agent_url"

// The driver_internal_info keys of the addresses the agent's token is
// bound to (package ramdisk writes them; docs/agent-trust.md).
const (
	AgentTokenAddressKey = "agent_token_address"
	AgentIPXEFetchedBy   = "agent_ipxe_fetched_by"
)

// AgentAddressKeys name the provisioning network's addresses, which
// only system scope reads.
var AgentAddressKeys = []string{AgentURLKey, AgentTokenAddressKey, AgentIPXEFetchedBy}

// View is a node as one caller may see it: secrets masked, and fields the
// caller's policy does not grant redacted.
type View struct {
	*ent.Node
	Traits             []string
	DriverInfo         map[string]any
	InstanceInfo       map[string]any
	DriverInternalInfo map[string]any
	Reservation        *string
	LastError          *string
	// AllocationUUID is the node's allocation, when loaded and present.
	AllocationUUID *string
	// ChassisUUID is the node's chassis, when loaded and present.
	ChassisUUID *string
	// Relation says how the caller's project relates to the node.
	Relation Relation
}

// Interface is the node's implementation of interface type t: the one it
// stores, or its driver's default when it stores none.
func (v *View) Interface(t string) string {
	if s := StoredInterface(v.Node, t); s != "" {
		return s
	}
	return bmc.DefaultInterface(v.Driver, t)
}

// StoredInterface is the node's <t>_interface column.
func StoredInterface(n *ent.Node, t string) string {
	switch t {
	case "bios":
		return n.BiosInterface
	case "boot":
		return n.BootInterface
	case "console":
		return n.ConsoleInterface
	case "deploy":
		return n.DeployInterface
	case "firmware":
		return n.FirmwareInterface
	case "inspect":
		return n.InspectInterface
	case "management":
		return n.ManagementInterface
	case "network":
		return n.NetworkInterface
	case "power":
		return n.PowerInterface
	case "raid":
		return n.RaidInterface
	case "rescue":
		return n.RescueInterface
	case "storage":
		return n.StorageInterface
	case "vendor":
		return n.VendorInterface
	}
	return ""
}

// Relation of a project-scoped caller to a node. System callers have
// RelSystem.
type Relation uint8

const (
	RelNone   Relation = 0
	RelOwner  Relation = 1
	RelLessee Relation = 2
	RelBoth   Relation = RelOwner | RelLessee
	RelSystem Relation = 4
)

// Owned reports whether the caller's project owns the node.
func (r Relation) Owned() bool { return r&RelOwner != 0 }

// Leased reports whether the caller's project leases the node.
func (r Relation) Leased() bool { return r&RelLessee != 0 }

// RelationOf computes how p relates to n.
func RelationOf(p *policies.Principal, owner, lessee string) Relation {
	if p == nil || p.System {
		return RelSystem
	}
	var r Relation
	if p.Project != "" && owner == p.Project {
		r |= RelOwner
	}
	if p.Project != "" && lessee == p.Project {
		r |= RelLessee
	}
	return r
}

// decisions are the field-visibility answers for one relation.
type decisions struct {
	driverInfo, internal, reservation, lastError bool
}

// redactor decides field visibility once per relation of the caller to a
// node, never once per node: a list of a thousand nodes costs at most four
// sets of policy checks.
type redactor struct {
	guard *guard.Guard
	p     *policies.Principal
	cache map[Relation]decisions
}

func newRedactor(g *guard.Guard) *redactor {
	return &redactor{guard: g, cache: map[Relation]decisions{}}
}

func (r *redactor) decide(ctx context.Context, rel Relation) decisions {
	if d, ok := r.cache[rel]; ok {
		return d
	}
	// A representative target for the relation: the caller's own project
	// where it owns or leases, a value that matches nobody elsewhere.
	t := policies.Target{NodeOwner: "\x00other", NodeLessee: "\x00other"}
	if r.p != nil && rel&RelOwner != 0 {
		t.NodeOwner = r.p.Project
	}
	if r.p != nil && rel&RelLessee != 0 {
		t.NodeLessee = r.p.Project
	}
	d := decisions{
		driverInfo:  r.guard.Allowed(ctx, RuleGetDriverInfo, t),
		internal:    r.guard.Allowed(ctx, RuleGetInternal, t),
		reservation: r.guard.Allowed(ctx, RuleGetReservation, t),
		lastError:   r.guard.Allowed(ctx, RuleGetLastError, t),
	}
	r.cache[rel] = d
	return d
}

func (r *redactor) view(ctx context.Context, n *ent.Node, traits []string) *View {
	if r.p == nil {
		r.p = policies.PrincipalFrom(ctx)
	}
	rel := RelationOf(r.p, n.Owner, n.Lessee)
	d := r.decide(ctx, rel)
	v := &View{Node: n, Traits: traits, Relation: rel}
	if a := n.Edges.Allocation; a != nil {
		v.AllocationUUID = &a.UUID
	}
	if ch := n.Edges.Chassis; ch != nil {
		v.ChassisUUID = &ch.UUID
	}
	if traits == nil {
		v.Traits = []string{}
	}
	if d.driverInfo {
		v.DriverInfo = MaskSecrets(n.DriverInfo)
	} else {
		v.DriverInfo = map[string]any{"content": RedactedDriverInfo}
	}
	v.InstanceInfo = MaskInstanceInfo(n.InstanceInfo)
	if d.internal {
		// The ramdisk agent's token (agent_secret_token) is masked for
		// everyone, as Ironic's show_password; the agent's callback URL
		// names the provisioning network and stays with system scope,
		// where Ironic shows it to owner readers too.
		v.DriverInternalInfo = MaskSecrets(n.DriverInternalInfo)
		if rel != RelSystem {
			for _, k := range AgentAddressKeys {
				delete(v.DriverInternalInfo, k)
			}
		}
	} else {
		v.DriverInternalInfo = map[string]any{"content": RedactedInternal}
	}
	if d.reservation {
		v.Reservation = n.Reservation
	} else {
		v.Reservation = new(RedactedReservation)
	}
	if !SeesURLs(r.p) {
		stripURLs(v)
	}
	switch {
	case !d.lastError:
		v.LastError = new(RedactedLastError)
	case n.LastError != nil:
		le := *n.LastError
		if rel != RelSystem {
			le = ScrubError(le)
		}
		v.LastError = &le
	}
	return v
}

// SeesURLs reports whether p reads image URLs as stored, credentials
// and signed tokens included: system admins only, who set them up; every
// other reader of a node, its next lessee among them, needs to know which
// image, not how to fetch it.
func SeesURLs(p *policies.Principal) bool {
	return p == nil || p.System && p.HasRole("admin")
}

// stripURLs takes the credentials out of every URL in v's dict fields:
// driver_info's deploy and rescue images, instance_info's image_source,
// kernel, ramdisk and boot_iso, driver_internal_info's steps to come, and
// the current steps' arguments (a firmware update's url). The node is
// copied first, since it may be shared with other callers' views.
func stripURLs(v *View) {
	n := *v.Node
	v.Node = &n
	v.DriverInfo = urlsafe.StripMap(v.DriverInfo)
	v.InstanceInfo = urlsafe.StripMap(v.InstanceInfo)
	v.DriverInternalInfo = urlsafe.StripMap(v.DriverInternalInfo)
	n.CleanStep = urlsafe.StripMap(n.CleanStep)
	n.DeployStep = urlsafe.StripMap(n.DeployStep)
	n.ServiceStep = urlsafe.StripMap(n.ServiceStep)
}

// MaskSecrets returns a copy of driver_info with every secret value masked.
func MaskSecrets(info map[string]any) map[string]any {
	out := make(map[string]any, len(info))
	for k, v := range info {
		if bmc.IsSecretKey(k) {
			out[k] = Masked
		} else {
			out[k] = v
		}
	}
	return out
}

// MaskInstanceInfo returns a copy of instance_info with secrets masked:
// the keys driver_info masks, and the config drive, which carries user
// data and keys, as Ironic masks them.
func MaskInstanceInfo(info map[string]any) map[string]any {
	out := MaskSecrets(info)
	if _, ok := out["configdrive"]; ok {
		out["configdrive"] = Masked
	}
	return out
}

func isInstanceSecret(k string) bool { return k == "configdrive" || bmc.IsSecretKey(k) }

// Unmask puts the stored secrets back into field (driver_info or
// instance_info) after code that worked on its masked view, as a patch
// does; a mask where no secret was stored is refused, since storing it
// would turn a copied mask into a credential.
func Unmask(field string, old, info map[string]any) error {
	secret := bmc.IsSecretKey
	if field == "instance_info" {
		secret = isInstanceSecret
	}
	return keepSecrets(field, old, info, secret)
}

var (
	ipRE    = regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b|\[[0-9a-fA-F:]+\](?::\d+)?`)
	urlRE   = regexp.MustCompile(`https?://[^\s"']+`)
	hostRE  = regexp.MustCompile(`\b[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+:\d+\b`)
	credsRE = regexp.MustCompile(`(?i)(user(?:name)?|password|passwd|-U|-P)[=: ]+\S+`)
)

// ScrubError removes BMC addresses and anything credential-like from an
// error before a project caller reads it: tenants need to know why their
// operation failed, not where the management network is.
func ScrubError(s string) string {
	s = urlRE.ReplaceAllString(s, "[BMC]")
	s = ipRE.ReplaceAllString(s, "[BMC]")
	s = hostRE.ReplaceAllString(s, "[BMC]")
	return credsRE.ReplaceAllString(s, "$1 [redacted]")
}
