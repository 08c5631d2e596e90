package api

import (
	"context"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/leasing"
)

// LeasingPrefix is where ESI-Leap's v1 API is served (issue 43): beside
// Ironic's /v1, whose /v1/nodes it would otherwise collide with. Errors
// under it take ESI-Leap's shape (wsme's faultcode, faultstring and
// debuginfo at the top level) instead of Ironic's error_message.
const LeasingPrefix = "/leasing"

// Query parameters of ESI-Leap's lists.
var (
	offerListQuery = []string{"project_id", "resource_type", "resource_class", "resource_uuid", "start_time", "end_time",
		"available_start_time", "available_end_time", "status", "lessee_id"}
	leaseListQuery = []string{"project_id", "start_time", "end_time", "status", "offer_uuid", "view", "owner_id",
		"resource_type", "resource_uuid", "resource_class"}
	leasingNodeQuery  = []string{"resource_class", "owner", "lessee"}
	leasingEventQuery = []string{"last_event_id", "lessee_or_owner_id", "last_event_time", "event_type", "resource_type", "resource_uuid"}
)

// registerLeasing mounts ESI-Leap's API: the version documents at
// /leasing and /leasing/v1, which keystoneauth's discovery reads without
// a token, and the rest on v1 (/leasing/v1), which authenticates as
// Ironic's /v1 does.
func (a *API) registerLeasing(open, v1 fiber.Router) {
	open.Get(LeasingPrefix, a.leasingVersions)
	open.Get(LeasingPrefix+"/", a.leasingVersions)
	open.Get(LeasingPrefix+"/v1", a.leasingVersions)
	open.Get(LeasingPrefix+"/v1/", a.leasingVersions)
	v1.Get("/offers", query(offerListQuery...), a.listOffers)
	v1.Post("/offers", a.createOffer)
	v1.Get("/offers/:offer", query(), a.getOffer)
	v1.Delete("/offers/:offer", a.deleteOffer)
	v1.Post("/offers/:offer/claim", a.claimOffer)
	v1.Get("/leases", query(leaseListQuery...), a.listLeases)
	v1.Post("/leases", a.createLease)
	v1.Get("/leases/:lease", query(), a.getLease)
	v1.Patch("/leases/:lease", a.patchLease)
	v1.Delete("/leases/:lease", a.deleteLease)
	v1.Get("/nodes", query(leasingNodeQuery...), a.listLeasingNodes)
	v1.Get("/events", query(leasingEventQuery...), a.listLeaseEvents)
}

// leasingVersions is ESI-Leap's version document, with its 300 status.
func (a *API) leasingVersions(c *fiber.Ctx) error {
	href := baseURL(c) + LeasingPrefix + "/v1"
	return c.Status(fiber.StatusMultipleChoices).JSON(fiber.Map{"versions": []fiber.Map{{
		"id": "v1.0", "status": "CURRENT", "min_version": "1.0", "version": "1.0",
		"links": []fiber.Map{{"href": href, "rel": "self"}},
	}}})
}

// resourceType refuses a resource_type filter other than ironic_node, the
// one type Anvil leases.
func resourceType(c *fiber.Ctx) error {
	if rt := c.Query("resource_type"); rt != "" && rt != leasing.ResourceNode {
		return errs.BadRequest("resource_type", "resource_type %s unknown: Anvil leases ironic_node", rt)
	}
	return nil
}

// timeQuery reads an optional time query parameter.
func timeQuery(c *fiber.Ctx, name string) (*time.Time, error) {
	v := c.Query(name)
	if v == "" {
		return nil, nil
	}
	t, err := leasing.ParseTime(name, v)
	return &t, err
}

// timeBody reads an optional time of a body.
func timeBody(name string, v *string) (*time.Time, error) {
	if v == nil {
		return nil, nil
	}
	t, err := leasing.ParseTime(name, *v)
	return &t, err
}

func stampESI(t *time.Time) any {
	if t == nil {
		return nil
	}
	return leasing.Format(*t)
}

// resourceNodes are the nodes a page of offers or leases names, by UUID.
func (a *API) resourceNodes(ctx context.Context, uuids []string) (map[string]*ent.Node, error) {
	return a.Leasing.ResourceNodes(ctx, uuids)
}

func resourceName(n *ent.Node, id string) any {
	if n == nil || n.Name == nil {
		return id
	}
	return *n.Name
}

// offerJSON is an offer as ESI-Leap shows it, with its node n (nil when
// gone) and its free windows av.
func offerJSON(o *ent.Offer, n *ent.Node, av [][2]time.Time) fiber.Map {
	windows := make([][]string, len(av))
	for i, w := range av {
		windows[i] = []string{leasing.Format(w[0]), leasing.Format(w[1])}
	}
	m := fiber.Map{
		"uuid": o.UUID, "name": o.Name, "project_id": o.ProjectID, "project": o.ProjectID,
		"lessee_id": o.LesseeID, "lessee": o.LesseeID, "resource_type": o.ResourceType, "resource_uuid": o.ResourceUUID,
		"resource": resourceName(n, o.ResourceUUID), "resource_class": o.ResourceClass, "resource_properties": fiber.Map{},
		"start_time": stampESI(&o.StartTime), "end_time": stampESI(&o.EndTime), "status": o.Status,
		"properties": orEmpty(o.Properties), "availabilities": windows, "parent_lease_uuid": o.ParentLeaseUUID,
	}
	if n != nil {
		m["resource_properties"] = orEmpty(n.Properties)
	}
	return m
}

func leaseJSON(l *ent.Lease, n *ent.Node) fiber.Map {
	m := fiber.Map{
		"uuid": l.UUID, "name": l.Name, "project_id": l.ProjectID, "project": l.ProjectID, "owner_id": l.OwnerID, "owner": l.OwnerID,
		"resource_type": l.ResourceType, "resource_uuid": l.ResourceUUID, "resource": resourceName(n, l.ResourceUUID),
		"resource_class": nil, "resource_properties": fiber.Map{},
		"start_time": stampESI(&l.StartTime), "end_time": stampESI(&l.EndTime), "fulfill_time": stampESI(l.FulfillTime),
		"expire_time": stampESI(l.ExpireTime), "status": l.Status, "properties": orEmpty(l.Properties), "purpose": l.Purpose,
		"offer_uuid": l.OfferUUID, "parent_lease_uuid": l.ParentLeaseUUID,
	}
	if n != nil {
		m["resource_class"], m["resource_properties"] = n.ResourceClass, orEmpty(n.Properties)
	}
	return m
}

// offerBody is what POST /offers takes: ESI-Leap's writable offer fields.
type offerBody struct {
	Name         *string        `json:"name"`
	ResourceType string         `json:"resource_type"`
	ResourceUUID string         `json:"resource_uuid"`
	LesseeID     *string        `json:"lessee_id"`
	StartTime    *string        `json:"start_time"`
	EndTime      *string        `json:"end_time"`
	Properties   map[string]any `json:"properties"`
}

// leaseBody is what POST /leases and a claim take.
type leaseBody struct {
	Name         *string        `json:"name"`
	Purpose      *string        `json:"purpose"`
	ProjectID    string         `json:"project_id"`
	ResourceType string         `json:"resource_type"`
	ResourceUUID string         `json:"resource_uuid"`
	StartTime    *string        `json:"start_time"`
	EndTime      *string        `json:"end_time"`
	Properties   map[string]any `json:"properties"`
}

func (b leaseBody) input() (leasing.LeaseInput, error) {
	in := leasing.LeaseInput{Name: b.Name, Purpose: b.Purpose, ProjectID: b.ProjectID, ResourceType: b.ResourceType,
		ResourceUUID: b.ResourceUUID, Properties: b.Properties}
	var err error
	if in.StartTime, err = timeBody("start_time", b.StartTime); err != nil {
		return in, err
	}
	in.EndTime, err = timeBody("end_time", b.EndTime)
	return in, err
}

func (a *API) sendOffer(c *fiber.Ctx, status int, o *ent.Offer) error {
	ns, err := a.resourceNodes(c.UserContext(), []string{o.ResourceUUID})
	if err != nil {
		return err
	}
	av, err := a.Leasing.Availabilities(c.UserContext(), []*ent.Offer{o})
	if err != nil {
		return err
	}
	return c.Status(status).JSON(offerJSON(o, ns[o.ResourceUUID], av[o.UUID]))
}

func (a *API) sendLease(c *fiber.Ctx, status int, l *ent.Lease) error {
	ns, err := a.resourceNodes(c.UserContext(), []string{l.ResourceUUID})
	if err != nil {
		return err
	}
	return c.Status(status).JSON(leaseJSON(l, ns[l.ResourceUUID]))
}

func (a *API) listOffers(c *fiber.Ctx) error {
	f := leasing.OfferFilter{ProjectID: c.Query("project_id"), ResourceUUID: c.Query("resource_uuid"),
		ResourceClass: c.Query("resource_class"), LesseeID: c.Query("lessee_id"), Status: c.Query("status")}
	if err := resourceType(c); err != nil {
		return err
	}
	var err error
	for name, dst := range map[string]**time.Time{"start_time": &f.StartTime, "end_time": &f.EndTime,
		"available_start_time": &f.AvailableStart, "available_end_time": &f.AvailableEnd} {
		if *dst, err = timeQuery(c, name); err != nil {
			return err
		}
	}
	os, err := a.Leasing.ListOffers(c.UserContext(), f)
	if err != nil {
		return err
	}
	ids := make([]string, len(os))
	for i, o := range os {
		ids[i] = o.ResourceUUID
	}
	ns, err := a.resourceNodes(c.UserContext(), ids)
	if err != nil {
		return err
	}
	av, err := a.Leasing.Availabilities(c.UserContext(), os)
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(os))
	for i, o := range os {
		out[i] = offerJSON(o, ns[o.ResourceUUID], av[o.UUID])
	}
	return c.JSON(fiber.Map{"offers": out})
}

func (a *API) createOffer(c *fiber.Ctx) error {
	var b offerBody
	if err := bind(c, &b); err != nil {
		return err
	}
	in := leasing.OfferInput{Name: b.Name, ResourceType: b.ResourceType, ResourceUUID: b.ResourceUUID, LesseeID: b.LesseeID, Properties: b.Properties}
	var err error
	if in.StartTime, err = timeBody("start_time", b.StartTime); err != nil {
		return err
	}
	if in.EndTime, err = timeBody("end_time", b.EndTime); err != nil {
		return err
	}
	o, err := a.Leasing.CreateOffer(c.UserContext(), in)
	if err != nil {
		return err
	}
	return a.sendOffer(c, fiber.StatusCreated, o)
}

func (a *API) getOffer(c *fiber.Ctx) error {
	o, err := a.Leasing.GetOffer(c.UserContext(), c.Params("offer"))
	if err != nil {
		return err
	}
	return a.sendOffer(c, fiber.StatusOK, o)
}

func (a *API) deleteOffer(c *fiber.Ctx) error {
	if err := a.Leasing.DeleteOffer(c.UserContext(), c.Params("offer")); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusOK)
}

func (a *API) claimOffer(c *fiber.Ctx) error {
	var b leaseBody
	// A claim may send no body: the whole default window.
	if len(c.Body()) > 0 {
		if err := bind(c, &b); err != nil {
			return err
		}
	}
	in, err := b.input()
	if err != nil {
		return err
	}
	l, err := a.Leasing.Claim(c.UserContext(), c.Params("offer"), in)
	if err != nil {
		return err
	}
	return a.sendLease(c, fiber.StatusCreated, l)
}

func (a *API) listLeases(c *fiber.Ctx) error {
	f := leasing.LeaseFilter{ProjectID: c.Query("project_id"), OwnerID: c.Query("owner_id"), OfferUUID: c.Query("offer_uuid"),
		ResourceUUID: c.Query("resource_uuid"), Status: c.Query("status")}
	switch v := c.Query("view"); v {
	case "":
	case "all":
		f.All = true
	default:
		return errs.BadRequest("view", "view %q is not all", v)
	}
	if err := resourceType(c); err != nil {
		return err
	}
	var err error
	if f.StartTime, err = timeQuery(c, "start_time"); err != nil {
		return err
	}
	if f.EndTime, err = timeQuery(c, "end_time"); err != nil {
		return err
	}
	ls, err := a.Leasing.ListLeases(c.UserContext(), f)
	if err != nil {
		return err
	}
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = l.ResourceUUID
	}
	ns, err := a.resourceNodes(c.UserContext(), ids)
	if err != nil {
		return err
	}
	class := c.Query("resource_class")
	out := []fiber.Map{}
	for _, l := range ls {
		n := ns[l.ResourceUUID]
		if class != "" && (n == nil || n.ResourceClass == nil || *n.ResourceClass != class) {
			continue
		}
		out = append(out, leaseJSON(l, n))
	}
	return c.JSON(fiber.Map{"leases": out})
}

func (a *API) createLease(c *fiber.Ctx) error {
	var b leaseBody
	if err := bind(c, &b); err != nil {
		return err
	}
	in, err := b.input()
	if err != nil {
		return err
	}
	l, err := a.Leasing.CreateLease(c.UserContext(), in)
	if err != nil {
		return err
	}
	return a.sendLease(c, fiber.StatusCreated, l)
}

func (a *API) getLease(c *fiber.Ctx) error {
	l, err := a.Leasing.GetLease(c.UserContext(), c.Params("lease"))
	if err != nil {
		return err
	}
	return a.sendLease(c, fiber.StatusOK, l)
}

// patchLease is ESI-Leap's PATCH: a flat object whose only key is
// end_time.
func (a *API) patchLease(c *fiber.Ctx) error {
	var b map[string]any
	if err := bind(c, &b); err != nil {
		return err
	}
	for k := range b {
		if k != "end_time" {
			return errs.BadRequest(k, "Only the end_time field may be updated, not %s", k)
		}
	}
	s, ok := b["end_time"].(string)
	if !ok {
		return errs.BadRequest("end_time", "end_time is required, as a time such as 2030-01-02T15:04:05")
	}
	end, err := leasing.ParseTime("end_time", s)
	if err != nil {
		return err
	}
	l, err := a.Leasing.UpdateLease(c.UserContext(), c.Params("lease"), end)
	if err != nil {
		return err
	}
	return a.sendLease(c, fiber.StatusOK, l)
}

func (a *API) deleteLease(c *fiber.Ctx) error {
	if err := a.Leasing.CancelLease(c.UserContext(), c.Params("lease")); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusOK)
}

func (a *API) listLeasingNodes(c *fiber.Ctx) error {
	ns, err := a.Leasing.ListNodes(c.UserContext(), leasing.NodeFilter{ResourceClass: c.Query("resource_class"),
		Owner: c.Query("owner"), Lessee: c.Query("lessee")})
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(ns))
	for i, n := range ns {
		out[i] = fiber.Map{
			"name": n.Node.Name, "uuid": n.Node.UUID, "owner": n.Node.Owner, "lessee": n.Node.Lessee,
			"resource_class": n.Node.ResourceClass, "provision_state": n.Node.ProvisionState,
			"target_provision_state": n.Node.TargetProvisionState, "power_state": n.Node.PowerState,
			"target_power_state": n.Node.TargetPowerState, "maintenance": boolText(n.Node.Maintenance),
			"properties": orEmpty(n.Node.Properties), "offer_uuid": n.OfferUUID, "lease_uuid": n.LeaseUUID,
			"future_offers": n.FutureOffers, "future_leases": n.FutureLeases,
		}
	}
	return c.JSON(fiber.Map{"nodes": out})
}

// boolText is Python's str of a bool, as ESI-Leap writes maintenance.
func boolText(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func (a *API) listLeaseEvents(c *fiber.Ctx) error {
	f := leasing.EventFilter{LesseeOrOwner: c.Query("lessee_or_owner_id"), EventType: c.Query("event_type"), ResourceUUID: c.Query("resource_uuid")}
	if err := resourceType(c); err != nil {
		return err
	}
	if v := c.Query("last_event_id"); v != "" {
		id, err := strconv.Atoi(v)
		if err != nil || id < 0 {
			return errs.BadRequest("last_event_id", "last_event_id %q is not a whole number", v)
		}
		f.LastID = id
	}
	var err error
	if f.LastTime, err = timeQuery(c, "last_event_time"); err != nil {
		return err
	}
	evs, err := a.Leasing.ListEvents(c.UserContext(), f)
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(evs))
	for i, e := range evs {
		out[i] = fiber.Map{"id": e.ID, "event_type": e.EventType, "event_time": stampESI(&e.EventTime), "object_type": e.ObjectType,
			"object_uuid": e.ObjectUUID, "resource_type": e.ResourceType, "resource_uuid": e.ResourceUUID,
			"lessee_id": e.LesseeID, "owner_id": e.OwnerID}
	}
	return c.JSON(fiber.Map{"events": out})
}
