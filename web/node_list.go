package web

import (
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// listStates are the provision states the filter and the summary strip
// offer, in the order a node moves through them.
var listStates = []string{nodes.StateEnroll, nodes.StateVerifying, nodes.StateManageable, nodes.StateAvailable, nodes.StateActive,
	nodes.StateCleaning, nodes.StateCleanWait, conductor.StateCleanHold, nodes.StateCleanFailed,
	nodes.StateServicing, nodes.StateServiceWait, conductor.StateServiceHold, nodes.StateServiceFailed, conductor.StateAdopting, nodes.StateError}

// listSorts are the columns the list sorts by.
var listSorts = []string{"name", "provision_state", "power_state", "owner", "lessee", "resource_class", "created_at"}

// listQuery is the node list's filter bar, sort and page as the URL
// carries them. Values outside the choices fall back to the defaults, so
// an edited URL shows a list rather than an error.
type listQuery views.NodeFilter

func parseListQuery(v url.Values) listQuery {
	l := listQuery{Q: strings.TrimSpace(v.Get("q")), State: v.Get("state"), Power: v.Get("power"),
		Owner: strings.TrimSpace(v.Get("owner")), Lessee: strings.TrimSpace(v.Get("lessee")),
		Trait: strings.TrimSpace(v.Get("trait")), Class: strings.TrimSpace(v.Get("class")), Maint: v.Get("maint"),
		Failed: v.Get("failed") == "1", Sort: v.Get("sort"), Dir: v.Get("dir"), Fault: v.Get("fault"), Group: v.Get("group")}
	if !slices.Contains(nodes.Faults, l.Fault) {
		l.Fault = ""
	}
	if _, ok := groupKeys[l.Group]; !ok {
		l.Group = ""
	}
	if !slices.Contains(listStates, l.State) {
		l.State = ""
	}
	if !slices.Contains([]string{"power on", "power off", "unknown"}, l.Power) {
		l.Power = ""
	}
	if l.Maint != "yes" && l.Maint != "no" {
		l.Maint = ""
	}
	if !slices.Contains(listSorts, l.Sort) {
		l.Sort = "name"
	}
	if l.Dir != "desc" {
		l.Dir = "asc"
	}
	l.Size, _ = strconv.Atoi(v.Get("size"))
	if !slices.Contains(views.PageSizes, l.Size) {
		l.Size = 50
	}
	l.Page, _ = strconv.Atoi(v.Get("page"))
	if l.Page < 1 || l.Page > 100000 {
		l.Page = 1
	}
	return l
}

// filterValues are the filters alone (no sort or page), only those set.
func (l listQuery) filterValues() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"q": l.Q, "state": l.State, "power": l.Power, "owner": l.Owner, "lessee": l.Lessee,
		"trait": l.Trait, "class": l.Class, "maint": l.Maint, "fault": l.Fault} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if l.Failed {
		v.Set("failed", "1")
	}
	return v
}

// url is the list at this query; defaults are left out so URLs stay short.
func (l listQuery) url() string {
	v := l.values()
	if len(v) == 0 {
		return "/nodes"
	}
	return "/nodes?" + v.Encode()
}

// values are the query's parameters but the defaults.
func (l listQuery) values() url.Values {
	v := l.filterValues()
	if l.Group != "" {
		v.Set("group", l.Group)
	}
	if l.Sort != "name" {
		v.Set("sort", l.Sort)
	}
	if l.Dir != "asc" {
		v.Set("dir", l.Dir)
	}
	if l.Size != 50 {
		v.Set("size", strconv.Itoa(l.Size))
	}
	if l.Page > 1 {
		v.Set("page", strconv.Itoa(l.Page))
	}
	return v
}

// groupKeys are the columns the list groups by, as sort keys.
var groupKeys = map[string]string{"": "", "state": "provision_state", "owner": "owner", "lessee": "lessee", "class": "resource_class"}

// options are the service's list options for the filters.
func (l listQuery) options() nodes.ListOptions {
	o := nodes.ListOptions{SortKey: l.Sort, SortDir: l.Dir, Failed: l.Failed, GroupBy: groupKeys[l.Group]}
	set := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	o.Search, o.ProvisionState, o.Owner, o.Lessee = set(l.Q), set(l.State), set(l.Owner), set(l.Lessee)
	o.Trait, o.ResourceClass, o.Fault = set(strings.ToUpper(l.Trait)), set(l.Class), set(l.Fault)
	switch l.Power {
	case "unknown":
		o.PowerState = new(string)
	case "":
	default:
		o.PowerState = set(l.Power)
	}
	if l.Maint != "" {
		m := l.Maint == "yes"
		o.Maintenance = &m
	}
	return o
}

// listColumns are what a row shows; properties is the one JSON blob it
// reads, for the hardware columns, and only for the page's rows.
var listColumns = []string{"name", "provision_state", "power_state", "target_power_state", "maintenance", "last_error", "resource_class", "fault", "properties"}

// rowTraits is how many traits a row names before "+n".
const rowTraits = 2

func (p *Portal) home(c *fiber.Ctx) error {
	pg, err := p.page(c, "Nodes")
	if err != nil {
		return err
	}
	q := parseListQuery(queryValues(c))
	l, err := p.nodeList(c, q)
	if err != nil {
		if errs.Status(err) >= 500 {
			return err
		}
		// A filter the caller may not use (another project as owner):
		// the reason, and the list without rows.
		pg.Error = err.Error()
	}
	if l.CanEnrol = p.canEnrol(c.UserContext()); !l.CanEnrol {
		l.EnrolWhy = p.enrolWho(c.UserContext())
	}
	return render(c, 200, views.Home(pg, l))
}

func queryValues(c *fiber.Ctx) url.Values {
	v, _ := url.ParseQuery(string(c.Request().URI().QueryString()))
	return v
}

// nodeList reads the summary strip's counts (which give the total too)
// and one page: two queries, each filtered in SQL.
func (p *Portal) nodeList(c *fiber.Ctx, q listQuery) (views.NodeList, error) {
	ctx := c.UserContext()
	l := views.NodeList{Filter: views.NodeFilter(q), SortURLs: map[string]string{}}
	if fv := q.filterValues(); len(fv) > 0 {
		l.Query = fv.Encode()
	}
	all := q
	all.State, all.Failed, all.Page = "", false, 1
	l.AllURL = all.url()
	failed := all
	failed.Failed = true
	l.FailedURL = failed.url()
	for _, k := range listSorts {
		s := q
		s.Sort, s.Dir, s.Page = k, "asc", 1
		if q.Sort == k && q.Dir == "asc" {
			s.Dir = "desc"
		}
		l.SortURLs[k] = s.url()
	}
	o := q.options()
	counts, err := p.Nodes.CountStates(ctx, o)
	if err != nil {
		return l, err
	}
	shown := func(s string) int {
		if q.Failed {
			return counts[s].Failed
		}
		return counts[s].Total
	}
	states := slices.Clone(listStates)
	for s, n := range counts {
		l.AllCount += shown(s)
		l.Failed += n.Failed
		if !slices.Contains(states, s) {
			states = append(states, s) // a state this list does not know yet still counts
		}
	}
	slices.Sort(states[len(listStates):])
	for _, s := range states {
		if shown(s) == 0 && s != q.State {
			continue
		}
		u := all
		u.State, u.Failed = s, q.Failed
		l.States = append(l.States, views.StateCount{State: s, Count: shown(s), URL: u.url(), Active: s == q.State})
	}
	l.Total = l.AllCount
	if q.State != "" {
		l.Total = shown(q.State)
	}
	facets, err := p.facets.get(ctx, q.filterValues().Encode(), func() (map[string][]nodes.FacetCount, error) { return p.Nodes.Facets(ctx, o) })
	if err != nil {
		return l, err
	}
	var sc []nodes.FacetCount
	for _, st := range states {
		if shown(st) > 0 {
			sc = append(sc, nodes.FacetCount{Value: st, Count: shown(st)})
		}
	}
	l.Picks = picks(q, sc, facets, p.Nodes.OnlyProject(ctx))
	l.Pages = (l.Total + q.Size - 1) / q.Size
	keep := q.values()
	keep.Del("page")
	for _, k := range slices.Sorted(maps.Keys(keep)) {
		l.Keep = append(l.Keep, [2]string{k, keep.Get(k)})
	}
	o.Limit, o.Offset, o.Numbered, o.Columns, o.WithTraits = q.Size, (q.Page-1)*q.Size, true, listColumns, true
	page := &nodes.Page{}
	// The counts already say when no row falls on this page (no match,
	// or a page past the last), which would otherwise cost a walk over
	// every node to find none.
	if o.Offset < l.Total {
		if page, err = p.Nodes.List(ctx, o); err != nil {
			return l, err
		}
	}
	for _, n := range page.Nodes {
		l.Rows = append(l.Rows, nodeRow(n, isSystem(ctx)))
	}
	l.Groups = groups(q, l.Rows, shown, facets)
	if len(l.Rows) > 0 {
		l.From, l.To = o.Offset+1, o.Offset+len(l.Rows)
	}
	if q.Page > 1 {
		prev := q
		prev.Page--
		l.PrevURL = prev.url()
	}
	if page.More {
		next := q
		next.Page++
		l.NextURL = next.url()
	}
	return l, nil
}

func nodeRow(v *nodes.View, system bool) views.NodeRow {
	rel := "system"
	switch {
	case v.Relation == nodes.RelBoth:
		rel = "owner and lessee"
	case v.Relation.Owned():
		rel = "owner"
	case v.Relation.Leased():
		rel = "lessee"
	case v.Relation == nodes.RelNone:
		rel = "none"
	}
	power := deref(v.PowerState)
	if power == "" {
		power = "unknown" // no BMC has been asked yet
	}
	lastErr := forViewer(system, deref(v.LastError))
	if lastErr == nodes.RedactedLastError {
		lastErr = ""
	}
	r := views.NodeRow{UUID: v.UUID, Name: deref(v.Name), ProvisionState: v.ProvisionState, PowerState: power,
		TargetPowerState: deref(v.TargetPowerState), Owner: v.Owner, Lessee: v.Lessee, Relation: rel,
		Maintenance: v.Maintenance, ResourceClass: deref(v.ResourceClass), LastError: lastErr, Fault: deref(v.Fault),
		Traits: v.Traits, AllTraits: strings.Join(v.Traits, ", ")}
	r.CPUs, r.RAM, r.Disk = sizes(v.Properties)
	if len(r.Traits) > rowTraits {
		r.Traits, r.MoreTraits = r.Traits[:rowTraits], len(r.Traits)-rowTraits
	}
	return r
}

// sizes words a node's CPUs, memory and disk as its properties record them
// (as Ironic's inspection writes them); "" for what is not recorded.
func sizes(props map[string]any) (cpus, mem, disk string) {
	num := func(k string) (float64, bool) {
		switch x := props[k].(type) {
		case float64:
			return x, true
		case int:
			return float64(x), true
		case string:
			f, err := strconv.ParseFloat(x, 64)
			return f, err == nil
		}
		return 0, false
	}
	if n, ok := num("cpus"); ok {
		cpus = strconv.FormatFloat(n, 'f', -1, 64)
	}
	if n, ok := num("memory_mb"); ok {
		mem = strconv.FormatFloat(n/1024, 'f', -1, 64) + " GiB"
	}
	if n, ok := num("local_gb"); ok {
		disk = strconv.FormatFloat(n, 'f', -1, 64) + " GB"
	}
	return cpus, mem, disk
}

// picks are the filters' pick-lists: each value with its count under the
// other filters, the chosen one kept (at 0) when nothing has it. A
// project-scoped viewer may filter by its own project only, so its owner
// and lessee lists offer that project alone.
func picks(q listQuery, states []nodes.FacetCount, facets map[string][]nodes.FacetCount, only string) map[string][]views.Pick {
	out := map[string][]views.Pick{}
	add := func(name, chosen string, cs []nodes.FacetCount) {
		var ps []views.Pick
		found := false
		for _, c := range cs {
			if c.Value == "" || (only != "" && (name == "owner" || name == "lessee") && c.Value != only) {
				continue
			}
			found = found || c.Value == chosen
			ps = append(ps, views.Pick{Value: c.Value, Label: c.Value, Count: c.Count, Selected: c.Value == chosen})
		}
		if chosen != "" && !found {
			ps = append(ps, views.Pick{Value: chosen, Label: chosen, Selected: true})
		}
		out[name] = ps
	}
	add("state", q.State, states)
	power := slices.Clone(facets[nodes.FacetPower])
	for i, c := range power {
		if c.Value == "" {
			power[i].Value = "unknown" // the filter's name for no power reported
		}
	}
	add("power", q.Power, power)
	add("owner", q.Owner, facets[nodes.FacetOwner])
	add("lessee", q.Lessee, facets[nodes.FacetLessee])
	add("trait", strings.ToUpper(q.Trait), facets[nodes.FacetTrait])
	add("class", q.Class, facets[nodes.FacetClass])
	add("fault", q.Fault, facets[nodes.FacetFault])
	return out
}

// groups puts the page's rows under headers of the grouped column. The
// page is ordered by that column first, so a group is a run of rows; its
// total, from the counts already read for the filters, covers every page.
func groups(q listQuery, rows []views.NodeRow, states func(string) int, facets map[string][]nodes.FacetCount) []views.RowGroup {
	if q.Group == "" {
		return []views.RowGroup{{Rows: rows}}
	}
	key := map[string]func(views.NodeRow) string{
		"state":  func(r views.NodeRow) string { return r.ProvisionState },
		"owner":  func(r views.NodeRow) string { return r.Owner },
		"lessee": func(r views.NodeRow) string { return r.Lessee },
		"class":  func(r views.NodeRow) string { return r.ResourceClass },
	}[q.Group]
	total := func(v string) int {
		if q.Group == "state" {
			return states(v)
		}
		for _, c := range facets[map[string]string{"owner": nodes.FacetOwner, "lessee": nodes.FacetLessee, "class": nodes.FacetClass}[q.Group]] {
			if c.Value == v {
				return c.Count
			}
		}
		return 0
	}
	var gs []views.RowGroup
	for _, r := range rows {
		if k := key(r); len(gs) == 0 || gs[len(gs)-1].Label != k {
			gs = append(gs, views.RowGroup{Label: k, Total: total(k)})
		}
		gs[len(gs)-1].Rows = append(gs[len(gs)-1].Rows, r)
	}
	return gs
}
