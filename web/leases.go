package web

import (
	"context"
	"encoding/csv"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/leasing"
	"github.com/anvilproject/anvil/views"
)

// The lease pages (issue 43) call the leasing service, which finds,
// authorizes, validates, acts and audits as it does for ESI-Leap's API;
// the handlers read forms and say its refusals where they were asked.

// offersFilter reads the offers page's filter; a date range becomes the
// service's "free for the whole range" filter.
func offersFilter(c *fiber.Ctx) (views.OffersFilter, leasing.OfferFilter, error) {
	vf := views.OffersFilter{Class: strings.TrimSpace(c.Query("resource_class")), Property: strings.TrimSpace(c.Query("property")),
		From: strings.TrimSpace(c.Query("from")), To: strings.TrimSpace(c.Query("to"))}
	f := leasing.OfferFilter{ResourceClass: vf.Class}
	if vf.From == "" && vf.To == "" {
		return vf, f, nil
	}
	if vf.From == "" || vf.To == "" {
		return vf, f, errs.BadRequest("from", "Give both dates, free from and to, or neither.")
	}
	from, err := time.Parse("2006-01-02", vf.From)
	if err != nil {
		return vf, f, errs.BadRequest("from", "Free from: give a date such as 2030-01-02.")
	}
	to, err := time.Parse("2006-01-02", vf.To)
	if err != nil {
		return vf, f, errs.BadRequest("to", "to: give a date such as 2030-01-02.")
	}
	// The "to" date is a whole day: free until its end.
	to = to.AddDate(0, 0, 1)
	f.AvailableStart, f.AvailableEnd = &from, &to
	return vf, f, nil
}

// hasProperty matches "key=value" (or a bare key) against an offer's
// properties.
func hasProperty(props map[string]any, want string) bool {
	if want == "" {
		return true
	}
	k, v, eq := strings.Cut(want, "=")
	got, ok := props[strings.TrimSpace(k)]
	return ok && (!eq || fmt.Sprint(got) == strings.TrimSpace(v))
}

func propertiesText(props map[string]any) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(props)) {
		out = append(out, k+"="+fmt.Sprint(props[k]))
	}
	return strings.Join(out, ", ")
}

// offerRows are offers with their nodes' names and free windows.
func (p *Portal) offerRows(ctx context.Context, os []*ent.Offer) ([]views.OfferRow, error) {
	av, err := p.Leasing.Availabilities(ctx, os)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(os))
	for i, o := range os {
		ids[i] = o.ResourceUUID
	}
	ns, err := p.Leasing.ResourceNodes(ctx, ids)
	if err != nil {
		return nil, err
	}
	project := policies.PrincipalFrom(ctx).Project
	rows := make([]views.OfferRow, len(os))
	for i, o := range os {
		r := views.OfferRow{UUID: o.UUID, NodeUUID: o.ResourceUUID, Class: o.ResourceClass, Owner: o.ProjectID,
			Lessee: deref(o.LesseeID), Properties: propertiesText(o.Properties), Start: o.StartTime, End: o.EndTime, Free: av[o.UUID],
			Claimable: project != "" && o.ProjectID != project}
		if n := ns[o.ResourceUUID]; n != nil {
			r.NodeName = deref(n.Name)
		}
		rows[i] = r
	}
	return rows, nil
}

// offersPage lists the offers the viewer's project sees.
func (p *Portal) offersPage(c *fiber.Ctx) error { return p.showOffers(c, 200, "", nil) }

// showOffers renders the offers page; refused is a claim the service
// refused, shown beside its offer's form with what was asked.
func (p *Portal) showOffers(c *fiber.Ctx, status int, offerID string, refused *views.OfferRow) error {
	ctx := c.UserContext()
	pg, err := p.page(c, "Offers")
	if err != nil {
		return err
	}
	vf, f, ferr := offersFilter(c)
	if ferr != nil {
		pg.Error, status, f = ferr.Error(), 400, leasing.OfferFilter{ResourceClass: vf.Class}
	}
	all, err := p.Leasing.ListOffers(ctx, leasing.OfferFilter{})
	if err != nil {
		return p.fail(c, err)
	}
	classes := map[string]bool{}
	for _, o := range all {
		if o.ResourceClass != "" {
			classes[o.ResourceClass] = true
		}
	}
	vf.Classes = slices.Sorted(maps.Keys(classes))
	os, err := p.Leasing.ListOffers(ctx, f)
	if err != nil {
		return p.fail(c, err)
	}
	os = slices.DeleteFunc(os, func(o *ent.Offer) bool { return !hasProperty(o.Properties, vf.Property) })
	rows, err := p.offerRows(ctx, os)
	if err != nil {
		return err
	}
	for i := range rows {
		if rows[i].UUID == offerID && refused != nil {
			rows[i].Error, rows[i].ClaimStart, rows[i].ClaimEnd = refused.Error, refused.ClaimStart, refused.ClaimEnd
		}
	}
	return render(c, status, views.OffersPage(pg, vf, rows))
}

// localTime reads a datetime-local input as UTC, naming the field.
func localTime(field, label, v string) (time.Time, error) {
	t, err := time.Parse(views.LocalInput, strings.TrimSpace(v))
	if err != nil {
		return t, errs.BadRequest(field, "%s: give a date and time in UTC, such as 2030-01-02T09:00.", label)
	}
	return t, nil
}

// claimOffer claims part of an offer's window for the viewer's project;
// a refusal (overlap, quota, outside the window, bad input) is shown next
// to the offer's form.
func (p *Portal) claimOffer(c *fiber.Ctx) error {
	id := c.Params("id")
	asked := views.OfferRow{ClaimStart: c.FormValue("start"), ClaimEnd: c.FormValue("end")}
	refuse := func(err error) error {
		if errs.Status(err) == 404 {
			return p.fail(c, err)
		}
		asked.Error = refusal(err)
		return p.showOffers(c, errs.Status(err), id, &asked)
	}
	start, err := localTime("start", "Start", asked.ClaimStart)
	if err != nil {
		return refuse(err)
	}
	end, err := localTime("end", "End", asked.ClaimEnd)
	if err != nil {
		return refuse(err)
	}
	l, err := p.Leasing.Claim(c.UserContext(), id, leasing.LeaseInput{StartTime: &start, EndTime: &end})
	if err != nil {
		if errs.Status(err) >= 500 {
			return err
		}
		return refuse(err)
	}
	return p.flashTo(c, "/leases", fmt.Sprintf("Leased from %s to %s (UTC). Lease %s.", views.LocalInputText(l.StartTime), views.LocalInputText(l.EndTime), l.UUID))
}

// refusal says a service refusal as a sentence; a policy refusal names
// who may.
func refusal(err error) string {
	if errs.Status(err) == 403 && policyRefusal.MatchString(err.Error()) {
		return "Your role may not do this here: members of the lessee project claim, extend and return leases; members of the owner project offer nodes."
	}
	return err.Error()
}

// leaseRows are leases with their nodes' names.
func (p *Portal) leaseRows(ctx context.Context, ls []*ent.Lease) ([]views.LeaseRow, error) {
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = l.ResourceUUID
	}
	ns, err := p.Leasing.ResourceNodes(ctx, ids)
	if err != nil {
		return nil, err
	}
	project := policies.PrincipalFrom(ctx).Project
	rows := make([]views.LeaseRow, len(ls))
	for i, l := range ls {
		r := views.LeaseRow{UUID: l.UUID, NodeUUID: l.ResourceUUID, Project: l.ProjectID, Owner: l.OwnerID,
			Status: l.Status, Start: l.StartTime, End: l.EndTime, NodeHours: leasing.NodeHours(l, l.StartTime, l.EndTime)}
		if n := ns[l.ResourceUUID]; n != nil {
			r.NodeName = deref(n.Name)
		}
		r.Mine = project != "" && l.ProjectID == project && slices.Contains([]string{leasing.StatusCreated, leasing.StatusActive}, l.Status)
		r.Returnable = r.Mine || (project != "" && l.OwnerID == project && l.Status != leasing.StatusWaitCancel)
		rows[i] = r
	}
	return rows, nil
}

// leasesPage is My leases: what the viewer's project holds or let and
// is not over.
func (p *Portal) leasesPage(c *fiber.Ctx) error { return p.showLeases(c, 200, "", "") }

func (p *Portal) showLeases(c *fiber.Ctx, status int, leaseID, problem string) error {
	ctx := c.UserContext()
	pg, err := p.page(c, "My leases")
	if err != nil {
		return err
	}
	ls, err := p.Leasing.ListLeases(ctx, leasing.LeaseFilter{})
	if err != nil {
		return p.fail(c, err)
	}
	rows, err := p.leaseRows(ctx, ls)
	if err != nil {
		return err
	}
	for i := range rows {
		if rows[i].UUID == leaseID {
			rows[i].Error = problem
		}
	}
	return render(c, status, views.LeasesPage(pg, rows, time.Now()))
}

// extendLease moves a lease's end; a refusal (beyond the offer, the next
// lease, the quota) is shown on its row.
func (p *Portal) extendLease(c *fiber.Ctx) error {
	id := c.Params("id")
	end, err := localTime("end", "New end", c.FormValue("end"))
	if err == nil {
		var l *ent.Lease
		if l, err = p.Leasing.UpdateLease(c.UserContext(), id, end); err == nil {
			return p.flashTo(c, "/leases", "The lease now ends "+views.LocalInputText(l.EndTime)+" UTC.")
		}
	}
	if st := errs.Status(err); st >= 500 {
		return err
	} else if st == 404 {
		return p.fail(c, err)
	}
	return p.showLeases(c, errs.Status(err), id, refusal(err))
}

// returnLease ends a lease now (a booked one is cancelled); the
// conductor tears the node down and wipes it.
func (p *Portal) returnLease(c *fiber.Ctx) error {
	id := c.Params("id")
	err := p.Leasing.CancelLease(c.UserContext(), id)
	if st := errs.Status(err); err == nil {
		return p.flashTo(c, "/leases", "Returned: the node is torn down and wiped, and its window is free again.")
	} else if st >= 500 {
		return err
	} else if st == 404 {
		return p.fail(c, err)
	}
	return p.showLeases(c, errs.Status(err), id, refusal(err))
}

// ownerPage offers nodes and shows the claims on the project's offers.
func (p *Portal) ownerPage(c *fiber.Ctx) error {
	now := time.Now().UTC()
	return p.showOwner(c, 200, views.OwnerLeasing{Start: now.Add(time.Hour).Truncate(time.Hour).Format(views.LocalInput),
		End: now.Add(8 * 24 * time.Hour).Truncate(time.Hour).Format(views.LocalInput)}, "")
}

// ownerSelect is the node list's bulk "Offer for lease…": the owner's
// page with the selected nodes filled in.
func (p *Portal) ownerSelect(c *fiber.Ctx) error {
	sel, _, _, err := p.selection(c)
	if err != nil {
		return p.fail(c, err)
	}
	var names []string
	for _, n := range sel {
		names = append(names, nameOr(deref(n.Name), n.UUID))
	}
	now := time.Now().UTC()
	return p.showOwner(c, 200, views.OwnerLeasing{Nodes: strings.Join(names, " "), Start: now.Add(time.Hour).Truncate(time.Hour).Format(views.LocalInput),
		End: now.Add(8 * 24 * time.Hour).Truncate(time.Hour).Format(views.LocalInput)}, "")
}

// showOwner renders the owner's page; problem is a refused offer, said
// above the form, which keeps what was asked.
func (p *Portal) showOwner(c *fiber.Ctx, status int, o views.OwnerLeasing, problem string) error {
	ctx := c.UserContext()
	pg, err := p.page(c, "Offer nodes")
	if err != nil {
		return err
	}
	pg.Error = problem
	project := policies.PrincipalFrom(ctx).Project
	f := leasing.OfferFilter{ProjectID: project}
	lf := leasing.LeaseFilter{OwnerID: project, Status: "any"}
	if project == "" {
		f, lf = leasing.OfferFilter{}, leasing.LeaseFilter{All: true, Status: "any"}
	}
	os, err := p.Leasing.ListOffers(ctx, f)
	if err != nil {
		return p.fail(c, err)
	}
	if o.Offers, err = p.offerRows(ctx, os); err != nil {
		return err
	}
	ls, err := p.Leasing.ListLeases(ctx, lf)
	if err != nil {
		return p.fail(c, err)
	}
	if o.Claims, err = p.leaseRows(ctx, ls); err != nil {
		return err
	}
	o.Weeks, o.Util = utilisation(ls)
	return render(c, status, views.OwnerLeasingPage(pg, o))
}

// utilisation is leased node-hours per project per week (from Monday,
// UTC), over the weeks the leases span from the first one's, at most 12
// so that the table stays readable.
func utilisation(ls []*ent.Lease) ([]string, []views.UtilRow) {
	if len(ls) == 0 {
		return nil, nil
	}
	monday := func(t time.Time) time.Time {
		d := t.UTC().Truncate(24 * time.Hour)
		return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
	}
	first, last := monday(ls[0].StartTime), ls[0].EndTime
	for _, l := range ls {
		if monday(l.StartTime).Before(first) {
			first = monday(l.StartTime)
		}
		if l.EndTime.After(last) {
			last = l.EndTime
		}
	}
	var weeks []time.Time
	for w := first; w.Before(last) && len(weeks) < 12; w = w.AddDate(0, 0, 7) {
		weeks = append(weeks, w)
	}
	byProject := map[string][]float64{}
	for _, l := range ls {
		if byProject[l.ProjectID] == nil {
			byProject[l.ProjectID] = make([]float64, len(weeks))
		}
		for i, w := range weeks {
			byProject[l.ProjectID][i] += leasing.NodeHours(l, w, w.AddDate(0, 0, 7))
		}
	}
	labels := make([]string, len(weeks))
	for i, w := range weeks {
		labels[i] = w.Format("Jan 2")
	}
	var rows []views.UtilRow
	for _, pr := range slices.Sorted(maps.Keys(byProject)) {
		rows = append(rows, views.UtilRow{Project: pr, Hours: byProject[pr]})
	}
	return labels, rows
}

// parseProperties reads "key=value" lines.
func parseProperties(raw string) (map[string]any, error) {
	out := map[string]any{}
	for line := range strings.Lines(raw) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, errs.BadRequest("properties", "Properties: write one key=value a line; %q has no key.", line)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// offerNodes offers each node named for the window; nodes offered before
// a refusal stay offered, and the refusal names the node it stopped at.
func (p *Portal) offerNodes(c *fiber.Ctx) error {
	ctx := c.UserContext()
	o := views.OwnerLeasing{Nodes: c.FormValue("nodes"), Lessee: strings.TrimSpace(c.FormValue("lessee")), Start: c.FormValue("start"),
		End: c.FormValue("end"), Properties: c.FormValue("properties")}
	refuse := func(err error) error {
		if errs.Status(err) >= 500 {
			return err
		}
		return p.showOwner(c, errs.Status(err), o, refusal(err))
	}
	idents := strings.FieldsFunc(o.Nodes, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
	if len(idents) == 0 {
		return refuse(errs.BadRequest("nodes", "Nodes: name at least one node to offer."))
	}
	start, err := localTime("start", "From", o.Start)
	if err != nil {
		return refuse(err)
	}
	end, err := localTime("end", "To", o.End)
	if err != nil {
		return refuse(err)
	}
	props, err := parseProperties(c.FormValue("properties"))
	if err != nil {
		return refuse(err)
	}
	var lessee *string
	if o.Lessee != "" {
		lessee = &o.Lessee
	}
	for i, id := range idents {
		if _, err := p.Leasing.CreateOffer(ctx, leasing.OfferInput{ResourceUUID: id, LesseeID: lessee, StartTime: &start, EndTime: &end, Properties: props}); err != nil {
			if errs.Status(err) >= 500 {
				return err
			}
			msg := refusal(err)
			if i > 0 {
				msg = fmt.Sprintf("Offered %s; stopped at %s: %s", strings.Join(idents[:i], ", "), id, msg)
			}
			return p.showOwner(c, errs.Status(err), o, msg)
		}
	}
	what := fmt.Sprintf("%d nodes", len(idents))
	if len(idents) == 1 {
		what = "1 node"
	}
	return p.flashTo(c, "/leases/owner", fmt.Sprintf("Offered %s from %s to %s UTC.", what, views.LocalInputText(start), views.LocalInputText(end)))
}

// usageLeases are the leases a usage report covers: every lease for
// system scope, those the project let otherwise.
func (p *Portal) usageLeases(c *fiber.Ctx) ([]*ent.Lease, string, error) {
	pr := policies.PrincipalFrom(c.UserContext())
	if pr.Project == "" {
		ls, err := p.Leasing.ListLeases(c.UserContext(), leasing.LeaseFilter{All: true, Status: "any"})
		return ls, "Every project", err
	}
	ls, err := p.Leasing.ListLeases(c.UserContext(), leasing.LeaseFilter{OwnerID: pr.Project, Status: "any"})
	return ls, "Leases project " + pr.Project + " let", err
}

// usagePage is the usage report: leases, and totals per lessee and owner.
func (p *Portal) usagePage(c *fiber.Ctx) error {
	ctx := c.UserContext()
	pg, err := p.page(c, "Usage report")
	if err != nil {
		return err
	}
	ls, scope, err := p.usageLeases(c)
	if err != nil {
		return p.fail(c, err)
	}
	rows, err := p.leaseRows(ctx, ls)
	if err != nil {
		return err
	}
	u := views.Usage{Scope: scope, Rows: rows}
	at := map[[2]string]int{}
	for _, r := range rows {
		k := [2]string{r.Project, r.Owner}
		i, ok := at[k]
		if !ok {
			i, at[k] = len(u.Totals), len(u.Totals)
			u.Totals = append(u.Totals, views.UsageTotal{Project: r.Project, Owner: r.Owner})
		}
		u.Totals[i].Leases++
		u.Totals[i].NodeHours += r.NodeHours
		u.Total += r.NodeHours
	}
	slices.SortFunc(u.Totals, func(a, b views.UsageTotal) int {
		return strings.Compare(a.Project+"\x00"+a.Owner, b.Project+"\x00"+b.Owner)
	})
	return render(c, 200, views.UsagePage(pg, u))
}

// usageCSV is the usage report as CSV, one lease a line, its node-hours
// counted as the page's (and the quotas') are.
func (p *Portal) usageCSV(c *fiber.Ctx) error {
	ctx := c.UserContext()
	ls, _, err := p.usageLeases(c)
	if err != nil {
		return p.fail(c, err)
	}
	rows, err := p.leaseRows(ctx, ls)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "text/csv; charset=utf-8")
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="lease-usage.csv"`)
	w := csv.NewWriter(c.Response().BodyWriter())
	_ = w.Write([]string{"lease", "project", "owner", "node", "node_uuid", "status", "start", "end", "node_hours"})
	for _, r := range rows {
		_ = w.Write([]string{r.UUID, r.Project, r.Owner, r.NodeName, r.NodeUUID, r.Status, leasing.Format(r.Start), leasing.Format(r.End), views.Hours(r.NodeHours)})
	}
	w.Flush()
	return w.Error()
}

// nodeLeases is a node's lease calendar: the leases of it the viewer
// sees (not over) and the free windows of its offers.
func (p *Portal) nodeLeases(ctx context.Context, nodeUUID string) (views.NodeLeases, error) {
	var out views.NodeLeases
	ls, err := p.Leasing.ListLeases(ctx, leasing.LeaseFilter{ResourceUUID: nodeUUID})
	if err != nil && errs.Status(err) != 403 {
		return out, err
	}
	if out.Leases, err = p.leaseRows(ctx, ls); err != nil {
		return out, err
	}
	os, err := p.Leasing.ListOffers(ctx, leasing.OfferFilter{ResourceUUID: nodeUUID})
	if err != nil && errs.Status(err) != 403 {
		return out, err
	}
	out.Offers, err = p.offerRows(ctx, os)
	return out, err
}
