package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	entnode "github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/setting"
	"github.com/anvilproject/anvil/server/allocations"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// requestForm fills the pickers with the free nodes' counts; class is the
// class asked for, else the one with the most free nodes.
func (p *Portal) requestForm(c *fiber.Ctx, class string, chosen []string) (views.RequestForm, error) {
	av, err := p.Allocations.Available(c.UserContext())
	if err != nil {
		return views.RequestForm{}, err
	}
	f := views.RequestForm{Class: class, Chosen: map[string]bool{}}
	for _, rc := range slices.Sorted(maps.Keys(av.Classes)) {
		f.Classes = append(f.Classes, views.Choice{Value: rc, Available: av.Classes[rc]})
		if class == "" && av.Classes[rc] > av.Classes[f.Class] {
			f.Class = rc
		}
	}
	if class != "" && av.Classes[class] == 0 {
		// A class with no free node stays chosen, so a refusal reads
		// against what was asked.
		f.Classes = append(f.Classes, views.Choice{Value: class})
	}
	for _, t := range slices.Sorted(maps.Keys(av.Traits[f.Class])) {
		f.Traits = append(f.Traits, views.Choice{Value: t, Available: av.Traits[f.Class][t]})
	}
	for _, t := range chosen {
		f.Chosen[t] = true
	}
	return f, nil
}

// requestNodePage shows the form, with a fresh one-time token; after a
// refused request (refused=the token's key) it shows the form again with
// the reason and what was asked, read back from the request's record.
func (p *Portal) requestNodePage(c *fiber.Ctx) error {
	pg, err := p.page(c, "Request a node")
	if err != nil {
		return err
	}
	class, chosen := strings.TrimSpace(c.Query("resource_class")), []string(nil)
	var asked requestOutcome
	if key := c.Query("refused"); key != "" {
		if o, ok, err := p.outcome(c, onceKeyPrefix+key); err != nil {
			return err
		} else if ok && o.Done && o.Error != "" {
			pg.Error, class, chosen, asked = o.Error, o.Class, o.Traits, o
		}
	}
	f, err := p.requestForm(c, class, chosen)
	if err != nil {
		return err
	}
	f.Name, f.Quantity, f.Hours = asked.Name, max(asked.Quantity, 1), asked.Hours
	f.Once = p.newOnce(c)
	return render(c, 200, views.RequestNode(pg, f))
}

// A request form's one-time token is "expiry.random.signature", valid for
// the session that was shown the form until its expiry. Its first submit
// claims a record keyed by "portal_once:expiry:random"; a second submit of
// the same form (a double click, a refresh, a replay) finds the record and
// gets the first submit's outcome instead of a second allocation. Records
// go once expired, when no session that could send the form is left.
const (
	purposeRequest = "allocation-request"
	onceKeyPrefix  = "portal_once:"
	// onceWait bounds how long a second submit waits for the first's
	// outcome: longer than the first waits for the conductor.
	onceWait = 15 * time.Second
)

func (p *Portal) newOnce(c *fiber.Ctx) string {
	exp := fmt.Sprintf("%010d", time.Now().Add(AbsoluteTimeout).Unix())
	r := randomToken()[:22]
	return exp + "." + r + "." + p.sign(c, purposeRequest, exp, r)
}

// onceKey checks a submitted token and returns its record's key, or ""
// for one that is malformed, expired or signed for another session.
func (p *Portal) onceKey(c *fiber.Ctx, once string) string {
	exp, rest, _ := strings.Cut(once, ".")
	r, mac, _ := strings.Cut(rest, ".")
	if len(exp) != 10 || exp < fmt.Sprintf("%010d", time.Now().Unix()) || !p.signed(c, mac, purposeRequest, exp, r) {
		return ""
	}
	return onceKeyPrefix + exp + ":" + r
}

// requestOutcome is what a request form's record keeps: whose it is and,
// once Done, where its submit went and what it said.
type requestOutcome struct {
	User   string   `json:"user"`
	Done   bool     `json:"done,omitempty"`
	To     string   `json:"to,omitempty"`
	Flash  string   `json:"flash,omitempty"`
	Error  string   `json:"error,omitempty"`
	Class  string   `json:"class,omitempty"`
	Traits []string `json:"traits,omitempty"`
	// Name, Quantity and Hours are the rest of what was asked.
	Name     string `json:"name,omitempty"`
	Quantity int    `json:"quantity,omitempty"`
	Hours    string `json:"hours,omitempty"`
}

// outcome reads a record; ok is false when there is none or it is
// another principal's.
func (p *Portal) outcome(c *fiber.Ctx, key string) (requestOutcome, bool, error) {
	var o requestOutcome
	s, err := p.Admin.DB.Setting.Query().Where(setting.Key(key)).Only(c.UserContext())
	if ent.IsNotFound(err) {
		return o, false, nil
	}
	if err != nil {
		return o, false, err
	}
	if err := json.Unmarshal(s.Value, &o); err != nil {
		return o, false, err
	}
	return o, o.User == sessionOf(c).Principal(), nil
}

// claim records the first submit of a form; false means an earlier
// submit of it holds the record.
func (p *Portal) claim(c *fiber.Ctx, key string) (bool, error) {
	ctx := c.UserContext()
	now := fmt.Sprintf("%010d", time.Now().Unix())
	if _, err := p.Admin.DB.Setting.Delete().Where(setting.KeyHasPrefix(onceKeyPrefix), setting.KeyLT(onceKeyPrefix+now)).Exec(ctx); err != nil {
		return false, err
	}
	raw, _ := json.Marshal(requestOutcome{User: sessionOf(c).Principal()})
	err := p.Admin.DB.Setting.Create().SetKey(key).SetValue(raw).Exec(ctx)
	if ent.IsConstraintError(err) {
		return false, nil
	}
	return err == nil, err
}

// settle stores a submit's outcome for later submits of the same form
// and sends this one where it leads (POST, redirect, GET).
func (p *Portal) settle(c *fiber.Ctx, key string, o requestOutcome) error {
	o.User, o.Done = sessionOf(c).Principal(), true
	raw, _ := json.Marshal(o)
	if err := p.Admin.DB.Setting.Update().Where(setting.Key(key)).SetValue(raw).Exec(c.UserContext()); err != nil {
		return err
	}
	return p.follow(c, o)
}

func (p *Portal) follow(c *fiber.Ctx, o requestOutcome) error { return p.flashTo(c, o.To, o.Flash) }

// replayed answers a second submit of a form with the first's outcome,
// waiting for it while the first is still at work.
func (p *Portal) replayed(c *fiber.Ctx, key string) error {
	deadline := time.Now().Add(onceWait)
	for {
		o, ok, err := p.outcome(c, key)
		if err != nil {
			return err
		}
		if !ok {
			// Signed for this session, so only its own record can hold
			// the key; gone means expired.
			return p.follow(c, requestOutcome{To: "/allocations/new", Flash: "That form expired; request again."})
		}
		if o.Done {
			return p.follow(c, o)
		}
		if time.Now().After(deadline) {
			return p.follow(c, requestOutcome{To: "/allocations", Flash: "This request was already sent and is still at work; it is listed below once settled."})
		}
		select {
		case <-c.UserContext().Done():
			return c.UserContext().Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// A request asks for 1 to maxQuantity nodes, for at most maxLeaseHours
// when it gives a lease length (the API may cap it lower).
const (
	maxQuantity   = 10
	maxLeaseHours = 24 * 366
)

// request is what the request form asks for.
type request struct {
	in       allocations.Input
	name     string
	quantity int
	hours    string
}

// readRequest reads the form; quantity and lease length are checked
// here, everything else by the allocation service.
func readRequest(c *fiber.Ctx) (request, error) {
	r := request{in: allocations.Input{ResourceClass: strings.TrimSpace(c.FormValue("resource_class"))},
		name: strings.TrimSpace(c.FormValue("name")), hours: strings.TrimSpace(c.FormValue("lease_hours")), quantity: 1}
	for _, t := range c.Request().PostArgs().PeekMulti("traits") {
		if t := strings.TrimSpace(string(t)); t != "" {
			r.in.Traits = append(r.in.Traits, t)
		}
	}
	if q := strings.TrimSpace(c.FormValue("quantity")); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > maxQuantity {
			return r, errs.BadRequest("quantity", "quantity: ask for 1 to %d nodes", maxQuantity)
		}
		r.quantity = n
	}
	if r.hours != "" {
		h, err := strconv.Atoi(r.hours)
		if err != nil || h < 1 || h > maxLeaseHours {
			return r, errs.BadRequest("lease_hours", "lease_hours: give the lease length in whole hours, 1 to %d, or leave it empty to hold the nodes until released", maxLeaseHours)
		}
		// The allocation records when its lease ends; the conductor
		// gives the node back then.
		r.in.Extra = map[string]any{allocations.LeaseKey: time.Now().UTC().Add(time.Duration(h) * time.Hour).Format(time.RFC3339)}
	}
	return r, nil
}

// nameOf is the i-th (1-based) allocation's name: the name asked for,
// numbered when the request is for several nodes.
func (r request) nameOf(i int) *string {
	if r.name == "" {
		return nil
	}
	if r.quantity == 1 {
		return &r.name
	}
	n := fmt.Sprintf("%s-%d", r.name, i)
	return &n
}

func (r request) outcome(err error, key string) requestOutcome {
	return requestOutcome{To: "/allocations/new?" + url.Values{"refused": {strings.TrimPrefix(key, onceKeyPrefix)}}.Encode(),
		Error: err.Error(), Class: r.in.ResourceClass, Traits: r.in.Traits, Name: r.name, Quantity: r.quantity, Hours: r.hours}
}

// requestNode allocates and, once the conductor has reserved the nodes,
// sends the browser to the node (one) or to My allocations (several). A
// request for several is all or nothing: when fewer settle, those made
// are released. A refusal sends the browser back to the form, which
// shows the reason and what was asked. Each form submits once, however
// many nodes it asks for: see newOnce.
func (p *Portal) requestNode(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if c.FormValue("action") == "traits" {
		// Without JavaScript the trait picker follows the class this way.
		return c.Redirect("/allocations/new?"+url.Values{"resource_class": {strings.TrimSpace(c.FormValue("resource_class"))}}.Encode(), fiber.StatusSeeOther)
	}
	r, ferr := readRequest(c)
	key := p.onceKey(c, c.FormValue("once"))
	if key == "" {
		return p.refuseRequest(c, r, errs.BadRequest("once", "This form expired or was not issued to this session; check it and request again."))
	}
	if ferr != nil {
		return p.refuseRequest(c, r, ferr)
	}
	first, err := p.claim(c, key)
	if err != nil {
		return err
	}
	if !first {
		return p.replayed(c, key)
	}
	var made []*allocations.Allocation
	for i := 1; i <= r.quantity && err == nil; i++ {
		in := r.in
		in.Name = r.nameOf(i)
		var a *allocations.Allocation
		if a, err = p.Allocations.Create(ctx, in); err == nil {
			made = append(made, a)
		}
	}
	if err != nil && errs.Status(err) >= 500 {
		// Nothing stays allocated: the claim goes, so that sending the
		// same form again tries again rather than waiting on it.
		if rerr := p.releaseAll(ctx, made); rerr != nil {
			return errors.Join(err, rerr)
		}
		if _, derr := p.Admin.DB.Setting.Delete().Where(setting.Key(key)).Exec(ctx); derr != nil {
			return derr
		}
		return err
	}
	if err != nil {
		if rerr := p.releaseAll(ctx, made); rerr != nil {
			return errors.Join(err, rerr)
		}
		return p.settle(c, key, r.outcome(err, key))
	}
	// The conductor settles allocations in moments; the page answers
	// with the outcome rather than "allocating".
	deadline := time.Now().Add(10 * time.Second)
	for i, a := range made {
		if made[i], err = p.Allocations.Await(ctx, a, time.Until(deadline)); err != nil {
			// They exist, so a resend must not make more.
			return p.settle(c, key, requestOutcome{To: "/allocations",
				Flash: "The request was sent, but its outcome could not be read: the allocations are listed below."})
		}
	}
	if r.quantity == 1 {
		return p.settleOne(c, key, r, made[0])
	}
	active, why := 0, ""
	for _, a := range made {
		switch {
		case a.State == allocations.StateActive:
			active++
		case a.State == allocations.StateAllocating:
			why = "the others were still being looked for after 10 seconds"
		default:
			why = deref(a.LastError)
		}
	}
	if active < r.quantity {
		if rerr := p.releaseAll(ctx, made); rerr != nil {
			return rerr
		}
		err := errs.Conflict("Only %d of the %d nodes asked for could be reserved, so none is held: %s", active, r.quantity, why)
		return p.settle(c, key, r.outcome(err, key))
	}
	said := make([]string, len(made))
	for i, a := range made {
		said[i] = nameOr(a.NodeName, a.NodeUUID)
		if n := deref(a.Name); n != "" {
			said[i] = n + " on " + said[i]
		}
	}
	return p.settle(c, key, requestOutcome{To: "/allocations",
		Flash: fmt.Sprintf("Reserved %d nodes for %s: %s.", len(made), views.OwnerText(deref(made[0].Owner)), strings.Join(said, ", "))})
}

// settleOne answers a request for one node: its page once reserved, My
// allocations while the conductor still looks, else the refusal.
func (p *Portal) settleOne(c *fiber.Ctx, key string, r request, a *allocations.Allocation) error {
	switch a.State {
	case allocations.StateActive:
		return p.settle(c, key, requestOutcome{To: "/nodes/" + a.NodeUUID,
			Flash: fmt.Sprintf("%s reserved for %s.", nameOr(a.NodeName, a.NodeUUID), views.OwnerText(deref(a.Owner)))})
	case allocations.StateAllocating:
		return p.settle(c, key, requestOutcome{To: "/allocations",
			Flash: "Still looking for a node: every suitable one is busy for now. The allocation below settles within 30 seconds."})
	}
	// The failed allocation holds nothing; it goes, so that "My
	// allocations" lists what is held rather than every miss.
	if err := p.releaseAll(c.UserContext(), []*allocations.Allocation{a}); err != nil {
		return err
	}
	return p.settle(c, key, r.outcome(errs.Conflict("No node is free: %s", deref(a.LastError)), key))
}

// releaseAll deletes the allocations a refused request made; one
// already gone is no matter.
func (p *Portal) releaseAll(ctx context.Context, made []*allocations.Allocation) error {
	for _, a := range made {
		if err := p.Allocations.Delete(ctx, a.UUID); err != nil && errs.Status(err) != 404 {
			return err
		}
	}
	return nil
}

// refuseRequest shows the form again for a submit that claimed nothing,
// so there is nothing to resend.
func (p *Portal) refuseRequest(c *fiber.Ctx, r request, err error) error {
	pg, perr := p.page(c, "Request a node")
	if perr != nil {
		return perr
	}
	pg.Error = err.Error()
	f, ferr := p.requestForm(c, r.in.ResourceClass, r.in.Traits)
	if ferr != nil {
		return ferr
	}
	f.Name, f.Quantity, f.Hours = r.name, r.quantity, r.hours
	f.Once = p.newOnce(c)
	return render(c, errs.Status(err), views.RequestNode(pg, f))
}

func nameOr(name, uuid string) string {
	if name != "" {
		return name
	}
	return uuid
}

// listed bounds "My allocations": a project holds a handful.
const listed = 500

// allocationWipes is how many wipe records "My allocations" lists.
const allocationWipes = 20

func (p *Portal) allocationsPage(c *fiber.Ctx) error {
	pg, err := p.page(c, "My allocations")
	if err != nil {
		return err
	}
	as, more, err := p.Allocations.List(c.UserContext(), p.Nodes, allocations.ListOptions{Limit: listed, SortKey: "created_at", SortDir: "desc"})
	if err != nil {
		return p.fail(c, err)
	}
	states, err := p.nodeStates(c.UserContext(), as)
	if err != nil {
		return err
	}
	rows := make([]views.AllocationRow, len(as))
	for i, a := range as {
		rows[i] = views.AllocationRow{UUID: a.UUID, Name: deref(a.Name), State: a.State, Owner: deref(a.Owner), NodeUUID: a.NodeUUID,
			NodeName: a.NodeName, Created: a.CreatedAt, LastError: forViewer(isSystem(c.UserContext()), deref(a.LastError)), NodeState: states[a.NodeUUID]}
		if end, err := time.Parse(time.RFC3339, str(a.Extra[allocations.LeaseKey])); err == nil {
			rows[i].Ends = &end
		}
	}
	wipes, err := p.wipeRows(c.UserContext(), "", allocationWipes)
	if err != nil {
		return err
	}
	return render(c, 200, views.Allocations(pg, rows, more, wipes))
}

// nodeStates reads the provision state of the allocations' nodes that
// the viewer may see, by node UUID, in one query.
func (p *Portal) nodeStates(ctx context.Context, as []*allocations.Allocation) (map[string]string, error) {
	var uuids []string
	for _, a := range as {
		if a.NodeUUID != "" {
			uuids = append(uuids, a.NodeUUID)
		}
	}
	out := map[string]string{}
	if len(uuids) == 0 {
		return out, nil
	}
	ns, err := p.DB.Node.Query().Where(entnode.UUIDIn(uuids...)).
		Select(entnode.FieldUUID, entnode.FieldProvisionState, entnode.FieldOwner, entnode.FieldLessee).All(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if p.Guard.Allowed(ctx, nodes.RuleGet, nodes.Target(n)) {
			out[n.UUID] = n.ProvisionState
		}
	}
	return out, nil
}

// releaseAllocation is DELETE /v1/allocations/{id} for the browser: the
// same service call, so the same 404 for an allocation the viewer may not
// see and 403 for one it may see but not release.
func (p *Portal) releaseAllocation(c *fiber.Ctx) error {
	ctx := c.UserContext()
	a, err := p.Allocations.Get(ctx, c.Params("id"))
	if err == nil {
		err = p.Allocations.Delete(ctx, a.UUID)
	}
	if err != nil {
		return p.fail(c, err)
	}
	if a.NodeUUID == "" {
		return p.flashTo(c, "/allocations", "Removed allocation "+nameOr(deref(a.Name), a.UUID)+".")
	}
	return p.flashTo(c, "/allocations", "Released "+nameOr(a.NodeName, a.UUID)+".")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
