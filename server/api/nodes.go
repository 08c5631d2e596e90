package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
)

// chunk is how much of a node list's JSON is gathered before it goes to
// the connection. The page is read whole first, so a database error is
// still a 500 with a body; its JSON is then streamed, chunked, to the
// client as it is written: a detailed page of a thousand nodes is 2.5 MB,
// and written into the response's body buffer it stayed in fasthttp's
// pool between requests and raised the heap the collector aims for by as
// much (after the benchmark's lists on its 10,000-node database, the
// anonymous memory went from 24-29 MiB to 16-20 MiB; docs/memory.md).
const chunk = 32 << 10

func (a *API) listNodes(detail bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		v := ver(c)
		o, fs, err := listOptions(c, v, detail)
		if err != nil {
			return err
		}
		if o.Conductor, err = a.ringFilter(c, v); err != nil {
			return err
		}
		page, err := a.Nodes.List(c.UserContext(), o)
		if err != nil {
			return err
		}
		w := &jw{b: make([]byte, 0, 2*chunk)}
		w.setBase(baseURL(c))
		if err := a.withRings(c, w, fs); err != nil {
			return err
		}
		next := ""
		if page.More && len(page.Nodes) > 0 {
			next = nextURL(c, page.Nodes[len(page.Nodes)-1].UUID)
		}
		// Runs after the handler returns, when c is another request's:
		// it reads only what was computed above.
		c.Context().SetBodyStreamWriter(func(bw *bufio.Writer) {
			w.b = append(w.b, `{"nodes":[`...)
			for i, n := range page.Nodes {
				if i > 0 {
					w.b = append(w.b, ',')
				}
				writeNode(w, n, fs, v)
				if len(w.b) >= chunk {
					if _, err := bw.Write(w.b); err != nil {
						return // the client went away
					}
					w.b = w.b[:0]
				}
			}
			w.b = append(w.b, ']')
			if next != "" {
				w.b = append(w.b, `,"next":`...)
				w.b = appendString(w.b, next)
			}
			w.b = append(w.b, '}')
			_, _ = bw.Write(w.b)
		})
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return nil
	}
}

// nextURL repeats the request's query with the marker moved on.
func nextURL(c *fiber.Ctx, marker string) string {
	q := url.Values{}
	c.Context().QueryArgs().VisitAll(func(k, v []byte) { q.Add(string(k), string(v)) })
	q.Set("marker", marker)
	if q.Get("limit") == "" {
		q.Set("limit", strconv.Itoa(nodes.MaxLimit))
	}
	return baseURL(c) + c.Path() + "?" + q.Encode()
}

// ringFilter reads ?conductor= (1.49): the nodes the hash ring maps to
// that conductor, computed from the live conductors as a node's
// conductor field shows it. A conductor that is unknown or not alive
// serves no ring, so no node maps to it.
func (a *API) ringFilter(c *fiber.Ctx, v Version) (*nodes.RingFilter, error) {
	host := c.Query("conductor")
	if host == "" {
		return nil, nil
	}
	if v < VerConductor {
		return nil, errs.NotAcceptable("filter conductor requires API version %s or later", VerConductor)
	}
	rings, err := a.Ops.C.Rings(c.UserContext())
	if err != nil {
		return nil, err
	}
	for group, r := range rings {
		if slices.Contains(r.Hosts(), host) {
			return &nodes.RingFilter{Group: group, Maps: func(uuid string) bool { return r.Owner(uuid) == host }}, nil
		}
	}
	return &nodes.RingFilter{}, nil
}

func listOptions(c *fiber.Ctx, v Version, detail bool) (nodes.ListOptions, fieldSet, error) {
	var o nodes.ListOptions
	str := func(name string, since Version) (*string, error) {
		s := c.Query(name)
		if s == "" {
			return nil, nil
		}
		if v < since {
			return nil, errs.NotAcceptable("filter %s requires API version %s or later", name, since)
		}
		return &s, nil
	}
	boolean := func(name string) (*bool, error) {
		s := c.Query(name)
		if s == "" {
			return nil, nil
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, errs.BadRequest(name, "%s must be true or false, not %q", name, s)
		}
		return &b, nil
	}
	var err error
	for _, f := range []struct {
		dst   **string
		name  string
		since Version
	}{
		{&o.Owner, "owner", VerOwner}, {&o.Lessee, "lessee", VerLessee},
		{&o.ProvisionState, "provision_state", VerProvStateFilt},
		{&o.ResourceClass, "resource_class", VerResourceClass}, {&o.Driver, "driver", VerDriverFilter},
		{&o.Project, "project", VerLessee}, {&o.InstanceUUID, "instance_uuid", VerMin},
		{&o.DescriptionContains, "description_contains", VerDescription},
		{&o.Fault, "fault", VerFault}, {&o.ConductorGroup, "conductor_group", VerConductorGroup},
		{&o.ChassisUUID, "chassis_uuid", VerMin},
	} {
		if *f.dst, err = str(f.name, f.since); err != nil {
			return o, nil, err
		}
	}
	if id := c.Params("chassis"); id != "" {
		o.ChassisUUID = &id
	}
	if o.ChassisUUID != nil && !nodes.IsUUID(*o.ChassisUUID) {
		return o, nil, errs.BadRequest("chassis_uuid", "Expected a UUID for chassis_uuid but received %s.", *o.ChassisUUID)
	}
	if o.Fault != nil && !slices.Contains(nodes.Faults, *o.Fault) {
		return o, nil, errs.BadRequest("fault", "Unknown fault: %s. Valid faults are: %s", *o.Fault, strings.Join(nodes.Faults, ", "))
	}
	if o.Maintenance, err = boolean("maintenance"); err != nil {
		return o, nil, err
	}
	if o.Associated, err = boolean("associated"); err != nil {
		return o, nil, err
	}
	for _, f := range []struct {
		dst   **bool
		name  string
		since Version
	}{{&o.Retired, "retired", VerRetired}, {&o.Sharded, "sharded", VerShard}} {
		if *f.dst, err = boolean(f.name); err != nil {
			return o, nil, err
		}
		if *f.dst != nil && v < f.since {
			return o, nil, errs.NotAcceptable("filter %s requires API version %s or later", f.name, f.since)
		}
	}
	shard, err := str("shard", VerShard)
	if err != nil {
		return o, nil, err
	}
	if shard != nil {
		for s := range strings.SplitSeq(*shard, ",") {
			if s = strings.TrimSpace(s); s != "" {
				o.Shards = append(o.Shards, s)
			}
		}
	}
	if o.ParentNode, err = str("parent_node", VerParentNode); err != nil {
		return o, nil, err
	}
	children, err := boolean("include_children")
	if err != nil {
		return o, nil, err
	}
	if children != nil {
		if v < VerParentNode {
			return o, nil, errs.NotAcceptable("filter include_children requires API version %s or later", VerParentNode)
		}
		o.IncludeChildren = *children
	}
	if d := c.Query("detail"); d != "" {
		if detail {
			return o, nil, errs.BadRequest("detail", "detail cannot be combined with /nodes/detail")
		}
		if detail, err = strconv.ParseBool(d); err != nil {
			return o, nil, errs.BadRequest("detail", "detail must be true or false, not %q", d)
		}
	}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			return o, nil, errs.BadRequest("limit", "limit must be a positive integer, not %q", l)
		}
		o.Limit = n
	}
	o.Marker = c.Query("marker")
	o.SortKey, o.SortDir = c.Query("sort_key"), c.Query("sort_dir")
	var fs fieldSet
	switch raw := c.Query("fields"); {
	case raw != "" && detail:
		return o, nil, errs.BadRequest("fields", "fields cannot be combined with detail")
	case raw != "":
		if v < VerFields {
			return o, nil, errs.NotAcceptable("fields requires API version %s or later", VerFields)
		}
		if fs, err = parseFields(raw, v); err != nil {
			return o, nil, err
		}
	case detail:
		fs = allFields(v)
	default:
		fs = namedFields(defaultListFields, v)
	}
	o.WithTraits = fs.needs("traits")
	ifaces := slices.ContainsFunc(fs, func(i int) bool { return strings.HasSuffix(nodeFields[i].name, "_interface") })
	o.WithAllocation = fs.needs("allocation_uuid")
	o.WithChassis = fs.needs("chassis_uuid")
	if !detail {
		for _, i := range fs {
			o.Columns = append(o.Columns, nodeFields[i].name)
		}
		if o.WithChassis {
			o.Columns = append(o.Columns, "chassis_id")
		}
		if fs.needs("conductor") {
			// The ring maps a node within its group.
			o.Columns = append(o.Columns, "conductor_group")
		}
		if ifaces {
			// An interface a node never chose is its driver's default.
			o.Columns = append(o.Columns, "driver")
		}
	}
	return o, fs, nil
}

func (a *API) getNode(c *fiber.Ctx) error {
	v := ver(c)
	fs := allFields(v)
	if raw := c.Query("fields"); raw != "" {
		var err error
		if fs, err = parseFields(raw, v); err != nil {
			return err
		}
	}
	n, err := a.Nodes.Get(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	return a.sendNode(c, n, fs, v, 200)
}

// withRings gives w the hash rings when the response shows conductors.
func (a *API) withRings(c *fiber.Ctx, w *jw, fs fieldSet) error {
	if !fs.needs("conductor") {
		return nil
	}
	rings, err := a.Ops.C.Rings(c.UserContext())
	if err != nil {
		return err
	}
	w.conductor = rings.Owner
	return nil
}

func (a *API) sendNode(c *fiber.Ctx, n *nodes.View, fs fieldSet, v Version, status int) error {
	w := &jw{b: make([]byte, 0, 2048)}
	if err := a.withRings(c, w, fs); err != nil {
		return err
	}
	w.setBase(baseURL(c))
	writeNode(w, n, fs, v)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(status).Send(w.b)
}

// nodeCreate is the create body; unknown fields are refused by bind.
type nodeCreate struct {
	UUID          string         `json:"uuid"`
	Name          *string        `json:"name"`
	Driver        string         `json:"driver"`
	DriverInfo    map[string]any `json:"driver_info"`
	Properties    map[string]any `json:"properties"`
	Extra         map[string]any `json:"extra"`
	InstanceInfo  map[string]any `json:"instance_info"`
	Owner         *string        `json:"owner"`
	Lessee        *string        `json:"lessee"`
	ResourceClass *string        `json:"resource_class"`
	Description   *string        `json:"description"`
	InstanceUUID  *string        `json:"instance_uuid"`
	// ConductorGroup is "" when absent, as Ironic's create treats it.
	ConductorGroup      string         `json:"conductor_group"`
	ChassisUUID         *string        `json:"chassis_uuid"`
	BiosInterface       *string        `json:"bios_interface"`
	BootInterface       *string        `json:"boot_interface"`
	ConsoleInterface    *string        `json:"console_interface"`
	DeployInterface     *string        `json:"deploy_interface"`
	FirmwareInterface   *string        `json:"firmware_interface"`
	InspectInterface    *string        `json:"inspect_interface"`
	ManagementInterface *string        `json:"management_interface"`
	NetworkInterface    *string        `json:"network_interface"`
	PowerInterface      *string        `json:"power_interface"`
	RaidInterface       *string        `json:"raid_interface"`
	RescueInterface     *string        `json:"rescue_interface"`
	StorageInterface    *string        `json:"storage_interface"`
	VendorInterface     *string        `json:"vendor_interface"`
	AutomatedClean      *flexBool      `json:"automated_clean"`
	Retired             *flexBool      `json:"retired"`
	RetiredReason       *string        `json:"retired_reason"`
	NetworkData         map[string]any `json:"network_data"`
	Shard               *string        `json:"shard"`
	ParentNode          *string        `json:"parent_node"`
	DisablePowerOff     *flexBool      `json:"disable_power_off"`
	InstanceName        *string        `json:"instance_name"`
}

// flexBool is a boolean as Ironic's args.boolean reads one: true/false or
// one of its strings ("true", "off", "1", …).
type flexBool bool

func (b *flexBool) UnmarshalJSON(raw []byte) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	if x, ok := v.(bool); ok {
		*b = flexBool(x)
		return nil
	}
	if s, ok := v.(string); ok {
		if x, err := strconv.ParseBool(s); err == nil {
			*b = flexBool(x)
			return nil
		}
		switch strings.ToLower(s) {
		case "on", "yes", "y":
			*b = true
			return nil
		case "off", "no", "n":
			*b = false
			return nil
		}
	}
	return fmt.Errorf("%s is not a boolean", raw)
}

func (b *flexBool) val() bool { return b != nil && bool(*b) }

func (b *flexBool) ptr() *bool {
	if b == nil {
		return nil
	}
	return new(bool(*b))
}

// gated pairs each optional create field with whether it was given and
// the version that introduced it.
func (in *nodeCreate) gated() []struct {
	name  string
	set   bool
	since Version
} {
	type g = struct {
		name  string
		set   bool
		since Version
	}
	out := []g{
		{"name", in.Name != nil, VerName}, {"owner", in.Owner != nil, VerOwner}, {"lessee", in.Lessee != nil, VerLessee},
		{"description", in.Description != nil, VerDescription}, {"resource_class", in.ResourceClass != nil, VerResourceClass},
		{"automated_clean", in.AutomatedClean != nil, VerAutomatedClean}, {"retired", in.Retired != nil, VerRetired},
		{"retired_reason", in.RetiredReason != nil, VerRetired}, {"network_data", in.NetworkData != nil, VerNetworkData},
		{"shard", in.Shard != nil, VerShard}, {"parent_node", in.ParentNode != nil, VerParentNode},
		{"disable_power_off", in.DisablePowerOff != nil, VerDisablePowerOff}, {"instance_name", in.InstanceName != nil, VerInstanceName},
	}
	for t, p := range in.interfaces() {
		out = append(out, g{t + "_interface", p != nil, versionGatedPatchFields[t+"_interface"]})
	}
	return out
}

func (in *nodeCreate) interfaces() map[string]*string {
	return map[string]*string{
		"bios": in.BiosInterface, "boot": in.BootInterface, "console": in.ConsoleInterface, "deploy": in.DeployInterface,
		"firmware": in.FirmwareInterface, "inspect": in.InspectInterface, "management": in.ManagementInterface,
		"network": in.NetworkInterface, "power": in.PowerInterface, "raid": in.RaidInterface, "rescue": in.RescueInterface,
		"storage": in.StorageInterface, "vendor": in.VendorInterface,
	}
}

func (a *API) createNode(c *fiber.Ctx) error {
	v := ver(c)
	var in nodeCreate
	if err := bind(c, &in); err != nil {
		return err
	}
	for _, g := range in.gated() {
		if g.set {
			if err := requireVersion(v, g.since, g.name); err != nil {
				return err
			}
		}
	}
	ifaces := map[string]string{}
	for t, p := range in.interfaces() {
		// null is the default, as Ironic takes it.
		if p != nil && *p != "" {
			ifaces[t] = *p
		}
	}
	// Ironic accepts an empty conductor_group from any version: it is
	// the value every node has.
	if in.ConductorGroup != "" {
		if err := requireVersion(v, VerConductorGroup, "conductor_group"); err != nil {
			return err
		}
	}
	state := nodes.StateEnroll
	if v < VerEnrollDefault {
		state = nodes.StateAvailable
	}
	n, err := a.Nodes.Create(c.UserContext(), nodes.CreateInput{
		UUID: in.UUID, Name: in.Name, Driver: in.Driver, DriverInfo: in.DriverInfo,
		Properties: in.Properties, Extra: in.Extra, InstanceInfo: in.InstanceInfo,
		Owner: deref(in.Owner), Lessee: deref(in.Lessee), ResourceClass: in.ResourceClass,
		Description: in.Description, InstanceUUID: in.InstanceUUID, ProvisionState: state,
		ConductorGroup: in.ConductorGroup, Interfaces: ifaces, AutomatedClean: in.AutomatedClean.ptr(),
		Retired: in.Retired.val(), RetiredReason: in.RetiredReason, NetworkData: in.NetworkData,
		Shard: in.Shard, ParentNode: in.ParentNode, DisablePowerOff: in.DisablePowerOff.val(),
		InstanceName: in.InstanceName, ChassisUUID: in.ChassisUUID,
	})
	if err != nil {
		return err
	}
	c.Location(baseURL(c) + "/v1/nodes/" + n.UUID)
	return a.sendNode(c, n, allFields(v), v, 201)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (a *API) patchNode(c *fiber.Ctx) error {
	v := ver(c)
	allowed := func(f string) error {
		if since, ok := versionGatedPatchFields[f]; ok {
			return requireVersion(v, since, f)
		}
		return nil
	}
	reset := false
	if r := c.Query("reset_interfaces"); r != "" {
		if err := requireVersion(v, VerResetIfaces, "reset_interfaces"); err != nil {
			return err
		}
		var err error
		if reset, err = strconv.ParseBool(r); err != nil {
			return errs.BadRequest("reset_interfaces", "reset_interfaces must be true or false, not %q", r)
		}
		if reset && !patchesDriver(c.Body()) {
			return errs.BadRequest("reset_interfaces", "The reset_interfaces parameter can only be used when changing the node's driver.")
		}
	}
	// keep_secrets is Anvil's own: a system-scoped caller may change a
	// BMC's address or username without resending its password.
	keep := false
	if k := c.Query("keep_secrets"); k != "" {
		var err error
		if keep, err = strconv.ParseBool(k); err != nil {
			return errs.BadRequest("keep_secrets", "keep_secrets must be true or false, not %q", k)
		}
	}
	n, err := a.Nodes.PatchWith(c.UserContext(), c.Params("node"), c.Body(), allowed, nodes.PatchOptions{ResetInterfaces: reset, KeepSecrets: keep})
	if err != nil {
		return err
	}
	return a.sendNode(c, n, allFields(v), v, 200)
}

// patchesDriver reports whether a patch document names /driver; one that
// does not decode is left for the service to refuse.
func patchesDriver(raw []byte) bool {
	ops, err := nodes.DecodePatch(raw)
	if err != nil {
		return true
	}
	return slices.ContainsFunc(ops, func(op nodes.PatchOp) bool { return op.Path == "/driver" })
}

func (a *API) deleteNode(c *fiber.Ctx) error {
	if err := a.Nodes.Delete(c.UserContext(), c.Params("node")); err != nil {
		return err
	}
	return c.SendStatus(204)
}

func (a *API) listTraits(c *fiber.Ctx) error {
	if ver(c) < VerTraits {
		// Ironic's node controller reads an older GET .../traits as a
		// node show with ?fields=traits: the node is looked up (404, 403)
		// before the field is refused as too new (406).
		if _, err := a.Nodes.Authorized(c.UserContext(), c.Params("node"), nodes.RuleGet); err != nil {
			return err
		}
		return requireVersion(ver(c), VerTraits, "traits")
	}
	ts, err := a.Nodes.Traits(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	if ts == nil {
		// A node without traits has an empty list, as in Ironic, not null.
		ts = []string{}
	}
	return c.JSON(fiber.Map{"traits": ts})
}

// oldTraits answers a change to traits older than 1.37 as Ironic's node
// controller does, which routes it to no traits controller: a PUT finds
// no handler (405) and a DELETE a path it does not know (404), whatever
// the node.
func oldTraits(c *fiber.Ctx) error {
	if ver(c) >= VerTraits {
		return c.Next()
	}
	msg := "The API version does not allow traits; they need " + VerTraits.String()
	if c.Method() == fiber.MethodPut {
		return fiber.NewError(fiber.StatusMethodNotAllowed, msg)
	}
	return errs.NotFound("%s", msg)
}

func (a *API) setTraits(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, nodes.RuleTraitsSet); err != nil {
		return err
	}
	var in struct {
		Traits []string `json:"traits"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if in.Traits == nil {
		return errs.BadRequest("traits", "traits is required: a list of trait names")
	}
	if err := a.Nodes.SetTraits(c.UserContext(), c.Params("node"), in.Traits); err != nil {
		return err
	}
	return c.SendStatus(204)
}

func (a *API) addTrait(c *fiber.Ctx) error {
	t, _ := url.PathUnescape(c.Params("trait"))
	if err := a.Nodes.AddTrait(c.UserContext(), c.Params("node"), t); err != nil {
		return err
	}
	return c.SendStatus(204)
}

func (a *API) deleteTrait(c *fiber.Ctx) error {
	t, _ := url.PathUnescape(c.Params("trait"))
	if err := a.Nodes.RemoveTrait(c.UserContext(), c.Params("node"), t); err != nil {
		return err
	}
	return c.SendStatus(204)
}

func (a *API) deleteTraits(c *fiber.Ctx) error {
	if err := a.Nodes.RemoveTrait(c.UserContext(), c.Params("node"), ""); err != nil {
		return err
	}
	return c.SendStatus(204)
}

func (a *API) setMaintenance(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, nodes.RuleSetMaintenance); err != nil {
		return err
	}
	var in struct {
		Reason string `json:"reason"`
	}
	if len(strings.TrimSpace(string(c.Body()))) > 0 {
		if err := bind(c, &in); err != nil {
			return err
		}
	}
	if err := a.Nodes.SetMaintenance(c.UserContext(), c.Params("node"), true, in.Reason); err != nil {
		return err
	}
	return c.SendStatus(202)
}

func (a *API) clearMaintenance(c *fiber.Ctx) error {
	if err := a.Nodes.SetMaintenance(c.UserContext(), c.Params("node"), false, ""); err != nil {
		return err
	}
	return c.SendStatus(202)
}

func (a *API) listHistory(c *fiber.Ctx) error {
	detail, _ := strconv.ParseBool(c.Query("detail"))
	limit := nodes.MaxLimit
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			return errs.BadRequest("limit", "limit must be a positive integer, not %q", l)
		}
		limit = min(n, nodes.MaxLimit)
	}
	evs, err := a.Nodes.History(c.UserContext(), c.Params("node"), limit)
	if err != nil {
		return err
	}
	out := make([]json.RawMessage, len(evs))
	base := baseURL(c) + "/v1/nodes/" + c.Params("node") + "/history/"
	for i, e := range evs {
		out[i] = eventJSON(e, detail, base, ver(c))
	}
	return c.JSON(fiber.Map{"history": out})
}

func (a *API) getHistory(c *fiber.Ctx) error {
	e, err := a.Nodes.HistoryEvent(c.UserContext(), c.Params("node"), c.Params("event"))
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(eventJSON(e, true, baseURL(c)+"/v1/nodes/"+c.Params("node")+"/history/", ver(c)))
}
