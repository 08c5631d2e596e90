// Package nodes is the service layer for nodes: lookup, listing with
// tenant filtering in SQL, creation, JSON-patch updates, deletion, traits,
// maintenance and history. The JSON API and the portal both call it, so a
// page can never do what the API could not.
package nodes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/allocation"
	"github.com/anvilproject/anvil/ent/chassis"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/ent/trait"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/guard"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/store"
)

// Policy rules this package enforces, named as Ironic names them.
const (
	RuleGet             = "baremetal:node:get"
	RuleList            = "baremetal:node:list"
	RuleListAll         = "baremetal:node:list_all"
	RuleCreate          = "baremetal:node:create"
	RuleCreateSelfOwned = "baremetal:node:create:self_owned_node"
	RuleDelete          = "baremetal:node:delete"
	RuleDeleteSelfOwned = "baremetal:node:delete:self_owned_node"
	RuleUpdate          = "baremetal:node:update"
	RuleUpdateExtra     = "baremetal:node:update_extra"
	RuleUpdateInstInfo  = "baremetal:node:update_instance_info"
	// RuleUpdateConductorGroup guards moving a node between conductor
	// groups, which decides which conductors may work it.
	RuleUpdateConductorGroup = "baremetal:node:update:conductor_group"
	RuleOwnerProvisioned     = "baremetal:node:update_owner_provisioned"
	// Rules for fields with their own, as Ironic splits node updates.
	RuleUpdateDriverIfaces    = "baremetal:node:update:driver_interfaces"
	RuleUpdateNetworkData     = "baremetal:node:update:network_data"
	RuleUpdateRetired         = "baremetal:node:update:retired"
	RuleUpdateShard           = "baremetal:node:update:shard"
	RuleUpdateParentNode      = "baremetal:node:update:parent_node"
	RuleUpdateDisablePowerOff = "baremetal:node:update:disable_power_off"
	RuleDisableCleaning       = "baremetal:node:disable_cleaning"
	RuleSetRAIDState          = "baremetal:node:set_raid_state"
	RuleSetMaintenance        = "baremetal:node:set_maintenance"
	RuleClearMaintenance      = "baremetal:node:clear_maintenance"
	RuleTraitsList            = "baremetal:node:traits:list"
	RuleTraitsSet             = "baremetal:node:traits:set"
	RuleTraitsDelete          = "baremetal:node:traits:delete"
	RuleHistory               = "baremetal:node:history:get"
	RuleGetDriverInfo         = "baremetal:node:get:driver_info"
	RuleGetInternal           = "baremetal:node:get:driver_internal_info"
	RuleGetReservation        = "baremetal:node:get:reservation"
	RuleGetLastError          = "baremetal:node:get:last_error"
)

// Service serves node operations for the principal in each call's context.
type Service struct {
	db    *store.DB
	guard *guard.Guard
}

// New returns a node service.
func New(db *store.DB, g *guard.Guard) *Service { return &Service{db: db, guard: g} }

// Target is the policy target for n.
func Target(n *ent.Node) policies.Target {
	return policies.Target{NodeOwner: n.Owner, NodeLessee: n.Lessee}
}

func notFound(ident string) error { return errs.NotFound("Node %s could not be found.", ident) }

// Lookup finds a node by UUID or name without any policy check: for
// internal callers (the conductor) only.
func (s *Service) Lookup(ctx context.Context, ident string) (*ent.Node, error) {
	return lookup(ctx, s.db.Client, ident)
}

func lookup(ctx context.Context, c *ent.Client, ident string) (*ent.Node, error) {
	q := c.Node.Query()
	if IsUUID(ident) {
		q = q.Where(node.UUID(strings.ToLower(ident)))
	} else {
		if ident == "" || len(ident) > maxNameLen {
			return nil, notFound(ident)
		}
		q = q.Where(node.Name(ident))
	}
	n, err := q.Only(ctx)
	if ent.IsNotFound(err) {
		return nil, notFound(ident)
	}
	return n, err
}

// Authorized finds the node and checks every rule against it. A caller who
// may not even see the node gets 404, as if it did not exist; one who may
// see it but not do this gets 403.
func (s *Service) Authorized(ctx context.Context, ident string, rules ...string) (*ent.Node, error) {
	n, err := s.Lookup(ctx, ident)
	if err != nil {
		return nil, err
	}
	return n, s.authorize(ctx, n, ident, rules...)
}

func (s *Service) authorize(ctx context.Context, n *ent.Node, ident string, rules ...string) error {
	t := Target(n)
	for _, r := range rules {
		if err := s.guard.Authorize(ctx, r, "node", n.UUID, t); err != nil {
			if r == RuleGet || !s.guard.Allowed(ctx, RuleGet, t) {
				return notFound(ident)
			}
			return err
		}
	}
	return nil
}

// Get returns one node as the caller may see it.
func (s *Service) Get(ctx context.Context, ident string) (*View, error) {
	n, err := s.Authorized(ctx, ident, RuleGet)
	if err != nil {
		return nil, err
	}
	ts, err := n.QueryTraits().Select(trait.FieldTrait).Strings(ctx)
	if err != nil {
		return nil, err
	}
	a, err := n.QueryAllocation().Select(allocation.FieldUUID).Only(ctx)
	if err != nil && !ent.IsNotFound(err) {
		return nil, err
	}
	n.Edges.Allocation = a
	if n.ChassisID != nil {
		if n.Edges.Chassis, err = n.QueryChassis().Select(chassis.FieldID, chassis.FieldUUID).Only(ctx); err != nil && !ent.IsNotFound(err) {
			return nil, err
		}
	}
	r := newRedactor(s.guard)
	return r.view(ctx, n, ts), nil
}

// CreateInput is a new node as given by a caller.
type CreateInput struct {
	UUID          string
	Name          *string
	Driver        string
	DriverInfo    map[string]any
	Properties    map[string]any
	Extra         map[string]any
	InstanceInfo  map[string]any
	Owner         string
	Lessee        string
	ResourceClass *string
	Description   *string
	InstanceUUID  *string
	// ConductorGroup pins the node to that group's conductors.
	ConductorGroup string
	// ChassisUUID puts the node in that chassis, which must exist.
	ChassisUUID *string
	// ProvisionState is where the node starts: enroll, or available for
	// clients older than API 1.11.
	ProvisionState string
	// Interfaces maps interface types to implementations; types not
	// given get the driver's default.
	Interfaces      map[string]string
	AutomatedClean  *bool
	Retired         bool
	RetiredReason   *string
	NetworkData     map[string]any
	Shard           *string
	ParentNode      *string
	DisablePowerOff bool
	InstanceName    *string
}

// AuthorizeCreate decides whether the caller may enrol a node owned by
// owner and leased to lessee, and returns the owner it gets: a
// project-scoped caller refused baremetal:node:create may still enrol a
// node its own project owns (create:self_owned_node). Refusals are
// recorded by the guard. A connection test before enrolling asks it too,
// so nobody probes BMCs they could not enrol.
func (s *Service) AuthorizeCreate(ctx context.Context, id, owner, lessee string) (string, error) {
	t := policies.Target{NodeOwner: owner, NodeLessee: lessee}
	err := s.guard.Authorize(ctx, RuleCreate, "node", id, t)
	if err == nil {
		return owner, nil
	}
	p := policies.PrincipalFrom(ctx)
	if p == nil || p.System || (owner != "" && owner != p.Project) ||
		s.guard.Authorize(ctx, RuleCreateSelfOwned, "node", id, policies.Target{NodeOwner: p.Project}) != nil {
		return "", err
	}
	return p.Project, nil
}

// Create enrols a node.
func (s *Service) Create(ctx context.Context, in CreateInput) (*View, error) {
	owner, err := s.AuthorizeCreate(ctx, in.UUID, in.Owner, in.Lessee)
	if err != nil {
		return nil, err
	}
	in.Owner = owner
	if err := ValidateCreate(&in); err != nil {
		s.guard.Done(ctx, RuleCreate, "node", in.UUID, err, nil)
		return nil, err
	}
	if err := checkWipe(ctx, nil, in.DriverInfo); err != nil {
		s.guard.Done(ctx, RuleCreate, "node", in.UUID, err, nil)
		return nil, err
	}
	if err := bmc.CheckPaths(in.Driver, in.DriverInfo, nil, systemScope(ctx)); err != nil {
		err = fieldError(err)
		s.guard.Done(ctx, RuleCreate, "node", in.UUID, err, nil)
		return nil, err
	}
	if in.ParentNode != nil {
		// A parent the caller cannot see is one that does not exist.
		p, err := s.Authorized(ctx, *in.ParentNode, RuleGet)
		if err != nil {
			err = errs.BadRequest("parent_node", "Node %s could not be found.", *in.ParentNode)
			s.guard.Done(ctx, RuleCreate, "node", in.UUID, err, nil)
			return nil, err
		}
		in.ParentNode = &p.UUID
	}
	ifc := in.Interfaces
	chassisID, err := chassisOf(ctx, s.db.Client, in.ChassisUUID)
	if err != nil {
		s.guard.Done(ctx, RuleCreate, "node", in.UUID, err, nil)
		return nil, err
	}
	n, err := s.db.Node.Create().SetNillableChassisID(chassisID).
		SetUUID(in.UUID).SetNillableName(in.Name).SetDriver(in.Driver).
		SetDriverInfo(in.DriverInfo).SetProperties(in.Properties).SetExtra(in.Extra).
		SetInstanceInfo(in.InstanceInfo).SetOwner(in.Owner).SetLessee(in.Lessee).
		SetNillableResourceClass(in.ResourceClass).SetNillableDescription(in.Description).
		SetNillableInstanceUUID(in.InstanceUUID).SetProvisionState(in.ProvisionState).
		SetConductorGroup(in.ConductorGroup).
		SetBiosInterface(ifc["bios"]).SetBootInterface(ifc["boot"]).SetConsoleInterface(ifc["console"]).
		SetDeployInterface(ifc["deploy"]).SetFirmwareInterface(ifc["firmware"]).SetInspectInterface(ifc["inspect"]).
		SetManagementInterface(ifc["management"]).SetNetworkInterface(ifc["network"]).SetPowerInterface(ifc["power"]).
		SetRaidInterface(ifc["raid"]).SetRescueInterface(ifc["rescue"]).SetStorageInterface(ifc["storage"]).
		SetVendorInterface(ifc["vendor"]).
		SetNillableAutomatedClean(in.AutomatedClean).SetRetired(in.Retired).SetNillableRetiredReason(in.RetiredReason).
		SetNetworkData(in.NetworkData).SetNillableShard(in.Shard).SetNillableParentNode(in.ParentNode).
		SetDisablePowerOff(in.DisablePowerOff).SetNillableInstanceName(in.InstanceName).Save(ctx)
	if err != nil {
		err = constraintError(err, in.UUID, in.Name)
		s.guard.Done(ctx, RuleCreate, "node", in.UUID, err, nil)
		return nil, err
	}
	s.guard.Done(ctx, RuleCreate, "node", n.UUID, nil, map[string]any{"name": in.Name, "driver": in.Driver, "owner": in.Owner, "lessee": in.Lessee})
	s.db.Grew()
	v := newRedactor(s.guard).view(ctx, n, nil)
	if chassisID != nil {
		v.ChassisUUID = new(strings.ToLower(*in.ChassisUUID))
	}
	return v, nil
}

// chassisOf resolves a chassis_uuid given for a node to the chassis' id:
// nil for none, a 400 naming chassis_uuid for one that does not exist, as
// Ironic turns its ChassisNotFound into a bad request on nodes.
func chassisOf(ctx context.Context, c *ent.Client, ident *string) (*int, error) {
	if ident == nil || *ident == "" {
		return nil, nil
	}
	if !IsUUID(*ident) {
		return nil, errs.BadRequest("chassis_uuid", "chassis_uuid %q is not a valid UUID", *ident)
	}
	id, err := c.Chassis.Query().Where(chassis.UUID(strings.ToLower(*ident))).OnlyID(ctx)
	if ent.IsNotFound(err) {
		return nil, errs.BadRequest("chassis_uuid", "Chassis %s could not be found; chassis_uuid must name an existing chassis.", *ident)
	}
	if err != nil {
		return nil, err
	}
	return &id, nil
}

// ValidateCreate fills defaults and checks a new node's fields; shared by
// the API and bulk import so both refuse the same things.
func ValidateCreate(in *CreateInput) error {
	if in.UUID == "" {
		in.UUID = uuid.NewString()
	} else if !IsUUID(in.UUID) {
		return errs.BadRequest("uuid", "uuid %q is not a valid UUID", in.UUID)
	}
	in.UUID = strings.ToLower(in.UUID)
	if in.Name != nil {
		if err := ValidateName("name", *in.Name); err != nil {
			return err
		}
	}
	if in.Driver == "" {
		return errs.BadRequest("driver", "driver is required; one of %s", strings.Join(bmc.Drivers(), ", "))
	}
	if in.DriverInfo == nil {
		in.DriverInfo = map[string]any{}
	}
	if err := bmc.ValidateStored(in.Driver, in.DriverInfo); err != nil {
		return fieldError(err)
	}
	for f, v := range map[string]string{"owner": in.Owner, "lessee": in.Lessee} {
		if err := ValidateProject(f, v); err != nil {
			return err
		}
	}
	if in.ResourceClass != nil && len(*in.ResourceClass) > 80 {
		return errs.BadRequest("resource_class", "resource_class is longer than 80 characters")
	}
	var err error
	if in.ConductorGroup, err = ValidateConductorGroup("conductor_group", in.ConductorGroup); err != nil {
		return err
	}
	if in.InstanceUUID != nil && !IsUUID(*in.InstanceUUID) {
		return errs.BadRequest("instance_uuid", "instance_uuid %q is not a valid UUID", *in.InstanceUUID)
	}
	if in.Interfaces == nil {
		in.Interfaces = map[string]string{}
	}
	for t, impl := range in.Interfaces {
		if !slices.Contains(bmc.InterfaceTypes, t) {
			return errs.BadRequest(t+"_interface", "%s_interface is not a node field", t)
		}
		if err := bmc.CheckInterface(in.Driver, t, impl); err != nil {
			return fieldError(err)
		}
	}
	// A new node records its interfaces, as Ironic's does: a later
	// change of the driver's defaults does not change what it uses.
	for _, t := range bmc.InterfaceTypes {
		if in.Interfaces[t] == "" {
			in.Interfaces[t] = bmc.DefaultInterface(in.Driver, t)
		}
	}
	if in.RetiredReason != nil && !in.Retired {
		return errs.BadRequest("retired_reason", "The retired_reason field can only be set when retired is True")
	}
	for f, v := range map[string]*string{"retired_reason": in.RetiredReason, "shard": in.Shard, "instance_name": in.InstanceName, "parent_node": in.ParentNode} {
		if v == nil {
			continue
		}
		// A parent may be named; the service resolves it.
		if f == "parent_node" {
			if *v == "" || len(*v) > maxNameLen {
				return errs.BadRequest(f, "parent_node must name a node")
			}
			continue
		}
		if err := validateStrField(f, *v); err != nil {
			return err
		}
	}
	if in.NetworkData == nil {
		in.NetworkData = map[string]any{}
	}
	if err := ValidateNetworkData(in.NetworkData); err != nil {
		return err
	}
	for _, m := range []*map[string]any{&in.Properties, &in.Extra, &in.InstanceInfo} {
		if *m == nil {
			*m = map[string]any{}
		}
	}
	if in.ProvisionState == "" {
		in.ProvisionState = StateEnroll
	}
	return nil
}

// systemScope reports whether the caller acts in system scope, where
// values naming files on the conductor host may be given (bmc.CheckPaths).
func systemScope(ctx context.Context) bool {
	p := policies.PrincipalFrom(ctx)
	return p != nil && p.System
}

// fieldError turns a driver validation error into a 400 naming its field.
func fieldError(err error) error {
	var fe *bmc.FieldError
	if errors.As(err, &fe) {
		return errs.BadRequest(fe.Field, "%s", fe.Error())
	}
	return errs.BadRequest("driver", "%s", err.Error())
}

// constraintError explains a unique-constraint failure by the field that
// caused it.
func constraintError(err error, id string, name *string) error {
	if !ent.IsConstraintError(err) {
		return err
	}
	msg := err.Error()
	switch {
	case name != nil && strings.Contains(msg, "name"):
		return &errs.Error{Status: 409, Field: "name", Msg: fmt.Sprintf("A node with name %s already exists.", *name)}
	case strings.Contains(msg, "uuid"):
		return &errs.Error{Status: 409, Field: "uuid", Msg: fmt.Sprintf("A node with UUID %s already exists.", id)}
	}
	return errs.Conflict("the node conflicts with an existing one: %v", err)
}

// ErrProtected is Ironic's NodeProtected: a 403 for undeploying,
// rebuilding or deleting a protected node.
func ErrProtected(uuid string) error {
	return &errs.Error{Status: 403, Field: "protected", Msg: fmt.Sprintf("Node %s is protected and cannot be undeployed, rebuilt or deleted", uuid)}
}

func lockedError(n *ent.Node) error {
	return errs.NodeLocked(n.UUID, "host "+*n.Reservation)
}

// Delete removes a node that nothing is running on.
func (s *Service) Delete(ctx context.Context, ident string) error {
	n, err := s.Authorized(ctx, ident, RuleGet)
	if err != nil {
		return err
	}
	// An owner's admin may delete what its project owns (Ironic's
	// self_owned_node rule); everyone else needs the general rule.
	if !s.guard.Allowed(ctx, RuleDeleteSelfOwned, Target(n)) {
		if err := s.authorize(ctx, n, ident, RuleDelete); err != nil {
			return err
		}
	}
	err = store.RetryLocked(ctx, func() error {
		cur, err := s.db.Node.Get(ctx, n.ID)
		if err != nil {
			return err
		}
		return s.delete(ctx, cur)
	})
	s.guard.Done(ctx, RuleDelete, "node", n.UUID, err, nil)
	return err
}

func (s *Service) delete(ctx context.Context, n *ent.Node) error {
	if n.Reservation != nil {
		return lockedError(n)
	}
	if n.Protected {
		return ErrProtected(n.UUID)
	}
	if !deletable[n.ProvisionState] && !(n.Maintenance && n.ProvisionState == StateActive) {
		return errs.Conflict("Node %s can not be deleted while in provision state %q; it must be one of enroll, manageable, available, clean failed or error (or in maintenance)", n.UUID, n.ProvisionState)
	}
	cnt, err := s.db.Node.Delete().Where(node.ID(n.ID), node.ReservationIsNil()).Exec(ctx)
	if err != nil {
		return err
	}
	if cnt == 0 {
		return errs.NodeLocked(n.UUID, "another operation")
	}
	bmc.ForgetFake(n.UUID)
	return nil
}

// SetMaintenance puts a node into maintenance with a reason, or takes it
// out (on=false). A node in maintenance is left alone by the conductor.
func (s *Service) SetMaintenance(ctx context.Context, ident string, on bool, reason string) error {
	rule := RuleSetMaintenance
	if !on {
		rule = RuleClearMaintenance
	}
	n, err := s.Authorized(ctx, ident, rule)
	if err != nil {
		return err
	}
	if len(reason) > 4096 {
		err = errs.BadRequest("reason", "reason is longer than 4096 characters")
		s.guard.Done(ctx, rule, "node", n.UUID, err, nil)
		return err
	}
	msg := "Maintenance cleared"
	if on {
		msg = "Maintenance set: " + reason
	}
	err = store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		upd := tx.Node.UpdateOneID(n.ID).SetMaintenance(on).SetUpdatedAt(time.Now())
		switch {
		case on && reason != "":
			upd.SetMaintenanceReason(reason)
		case on:
			// No reason given is no reason, not an empty one: Ironic
			// shows null.
			upd.ClearMaintenanceReason()
		default:
			upd.ClearMaintenanceReason().ClearFault()
		}
		if err := upd.Exec(ctx); err != nil {
			return err
		}
		return history.Record(ctx, tx, history.Event{NodeID: n.ID, Type: "maintenance", Message: msg, User: userOf(ctx)})
	})
	s.guard.Done(ctx, rule, "node", n.UUID, err, map[string]any{"maintenance": on, "reason": reason})
	return err
}

func userOf(ctx context.Context) string {
	if p := policies.PrincipalFrom(ctx); p != nil {
		return p.User
	}
	return ""
}

// History returns a node's events, oldest first, at most limit of the
// newest.
func (s *Service) History(ctx context.Context, ident string, limit int) ([]*ent.NodeEvent, error) {
	n, err := s.Authorized(ctx, ident, RuleHistory)
	if err != nil {
		return nil, err
	}
	evs, err := n.QueryEvents().Order(ent.Desc(nodeevent.FieldCreatedAt), ent.Desc(nodeevent.FieldID)).Limit(limit).All(ctx)
	if err != nil {
		return nil, err
	}
	for i, j := 0, len(evs)-1; i < j; i, j = i+1, j-1 {
		evs[i], evs[j] = evs[j], evs[i]
	}
	scrubEvents(ctx, n, evs...)
	return evs, nil
}

// scrubEvents shows a failure's raw detail (the BMC's address, its
// answer, the dial error), stored apart from the event, to system-scope
// callers only, appended to the event as it always was. Project callers
// read the event alone, with addresses scrubbed as in last_error: the
// conductor words it from Anvil's own text, and the scrub catches any
// address a message quotes.
func scrubEvents(ctx context.Context, n *ent.Node, evs ...*ent.NodeEvent) {
	system := RelationOf(policies.PrincipalFrom(ctx), n.Owner, n.Lessee) == RelSystem
	for _, e := range evs {
		switch {
		case system && e.Detail != "":
			e.Event += " (detail: " + e.Detail + ")"
		case !system:
			e.Event, e.Detail = ScrubError(e.Event), ""
		}
	}
}

// HistoryEvent returns one event of a node's history.
func (s *Service) HistoryEvent(ctx context.Context, ident, eventUUID string) (*ent.NodeEvent, error) {
	n, err := s.Authorized(ctx, ident, RuleHistory)
	if err != nil {
		return nil, err
	}
	ev, err := n.QueryEvents().Where(nodeevent.UUID(eventUUID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, errs.NotFound("Node history record %s could not be found.", eventUUID)
	}
	if err != nil {
		return nil, err
	}
	scrubEvents(ctx, n, ev)
	return ev, nil
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return maps.Clone(m)
}
