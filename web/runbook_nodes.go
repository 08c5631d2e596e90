package web

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/views"
)

// pickerLimit is how many nodes the trait picker shows; a fleet larger
// than that is narrowed by the filter.
const pickerLimit = 200

// runbookTraits are the traits that let a node run r: its traits, or its
// name when it lists none (runbooks.MatchesTraits).
func runbookTraits(r *runbooks.Runbook) []string {
	if len(r.Traits) > 0 {
		return r.Traits
	}
	return []string{r.Name}
}

// carriers counts the nodes the viewer may see that carry one of r's
// traits: the nodes it could run on.
func (p *Portal) carriers(ctx context.Context, r *runbooks.Runbook) (int, error) {
	return p.Nodes.Count(ctx, nodes.ListOptions{AnyTrait: runbookTraits(r), IncludeChildren: true})
}

// reach is how far a runbook reaches for the viewer: Carriers are the
// nodes the viewer may see that carry one of its traits, Eligible those
// of them it may be run on by the viewer (the runbook takes the node and
// the viewer may run runbooks there), the first reachNames of them named
// in Names.
type reach struct {
	Carriers, Eligible int
	Names              []string
}

// reachNames is how many eligible nodes a saved runbook's message names.
const reachNames = 5

// reaches counts every runbook's reach, by UUID, from one read of the
// nodes carrying any of their traits: a chooser of runbooks costs the
// same two queries however many runbooks and nodes it counts. The policy
// is asked once per owner and lessee pair, which is all it looks at.
func (p *Portal) reaches(ctx context.Context, rs []*runbooks.Runbook) (map[string]reach, error) {
	var traits []string
	for _, r := range rs {
		for _, t := range runbookTraits(r) {
			if !slices.Contains(traits, t) {
				traits = append(traits, t)
			}
		}
	}
	holders, err := p.Nodes.TraitHolders(ctx, traits)
	if err != nil {
		return nil, err
	}
	may := map[[2]string]bool{}
	allowed := func(h nodes.TraitHolder) bool {
		k := [2]string{h.Node.Owner, h.Node.Lessee}
		ok, seen := may[k]
		if !seen {
			ok = p.Guard.Allowed(ctx, conductor.RuleProvisionRunbook, nodes.Target(h.Node))
			may[k] = ok
		}
		return ok
	}
	out := make(map[string]reach, len(rs))
	for _, r := range rs {
		var n reach
		for _, h := range holders {
			if !runbooks.MatchesTraits(r.Runbook, h.Traits) {
				continue
			}
			n.Carriers++
			if runbooks.Accepts(r.Runbook, h.Node, h.Traits) == nil && allowed(h) {
				n.Eligible++
				if len(n.Names) < reachNames {
					n.Names = append(n.Names, cmp.Or(deref(h.Node.Name), h.Node.UUID))
				}
			}
		}
		out[r.UUID] = n
	}
	return out, nil
}

// runbookNodes shows how many nodes carry a runbook's trait and a picker
// of the viewer's nodes to add it to.
func (p *Portal) runbookNodes(c *fiber.Ctx) error {
	r, err := p.Runbooks.Get(c.UserContext(), c.Params("name"))
	if err != nil {
		return p.fail(c, err)
	}
	v := views.RunbookNodes{Q: strings.TrimSpace(c.Query("q")), Class: strings.TrimSpace(c.Query("class"))}
	return p.runbookNodesPage(c, r, v, 200)
}

func (p *Portal) runbookNodesPage(c *fiber.Ctx, r *runbooks.Runbook, v views.RunbookNodes, status int) error {
	ctx := c.UserContext()
	v.Name, v.Traits = r.Name, runbookTraits(r)
	if v.Trait == "" {
		v.Trait = v.Traits[0]
	}
	var err error
	if v.Carriers, err = p.carriers(ctx, r); err != nil {
		return p.fail(c, err)
	}
	o := nodes.ListOptions{WithTraits: true, IncludeChildren: true, Numbered: true, SortKey: "name", SortDir: "asc", Limit: pickerLimit}
	if v.Q != "" {
		o.Search = &v.Q
	}
	if v.Class != "" {
		o.ResourceClass = &v.Class
	}
	page, err := p.Nodes.List(ctx, o)
	if err != nil {
		return p.fail(c, err)
	}
	v.More = page.More
	// Refusals are the same for every node of one project, so each shows
	// once with its count and its nodes, not once a row.
	group := map[[2]any]int{}
	for _, n := range page.Nodes {
		row := views.TraitNode{UUID: n.UUID, Name: label(n), Class: deref(n.ResourceClass), Owner: n.Owner, Has: slices.Contains(n.Traits, v.Trait)}
		if !p.Guard.Allowed(ctx, nodes.RuleTraitsSet, nodes.Target(n.Node)) {
			k := [2]any{row.Has, n.Owner}
			i, ok := group[k]
			if !ok {
				i = len(v.Refusals)
				group[k] = i
				v.Refusals = append(v.Refusals, views.Refusal{ID: "tn-why-" + strconv.Itoa(i)})
			}
			v.Refusals[i].Nodes = append(v.Refusals[i].Nodes, row.Name)
			row.WhyID = v.Refusals[i].ID
		}
		v.Nodes = append(v.Nodes, row)
	}
	for k, i := range group {
		v.Refusals[i].Why = traitRefusal(ctx, len(v.Refusals[i].Nodes), k[0].(bool), k[1].(string), v.Trait)
	}
	pg, err := p.page(c, "Nodes for runbook "+r.Name)
	if err != nil {
		return err
	}
	return render(c, status, views.RunbookNodesPage(pg, v))
}

// traitRefusal says why n nodes of project owner cannot be given trait
// (or already carry it) by the viewer, and whom to ask: those who may
// change a node's traits by default (baremetal:node:traits:set).
func traitRefusal(ctx context.Context, n int, has bool, owner, trait string) string {
	count, verb := strconv.Itoa(n)+" nodes", []string{"carry", "lack"}
	if n == 1 {
		count, verb = "1 node", []string{"carries", "lacks"}
	}
	if has {
		return fmt.Sprintf("%s already %s %s, so the runbook can run there; your role%s may not change their traits.", count, verb[0], trait, roleSaid(ctx, " (%s)"))
	}
	who := "project " + owner + "'s managers or admins, or an operator,"
	if owner == "" {
		who = "an operator"
	}
	return fmt.Sprintf("%s %s trait %s, and your role%s may not add it: ask %s to add it.", count, verb[1], trait, roleSaid(ctx, " (%s)"), who)
}

// addRunbookTrait adds the runbook's trait to each chosen node through
// the nodes service, which checks baremetal:node:traits:set on each and
// audits each change, as PUT /v1/nodes/{node}/traits/{trait} does; every
// node's outcome is shown, refusals with their reason.
func (p *Portal) addRunbookTrait(c *fiber.Ctx) error {
	ctx := c.UserContext()
	r, err := p.Runbooks.Get(ctx, c.Params("name"))
	if err != nil {
		return p.fail(c, err)
	}
	v := views.RunbookNodes{Q: strings.TrimSpace(c.FormValue("q")), Class: strings.TrimSpace(c.FormValue("class")), Trait: c.FormValue("trait")}
	var ids []string
	for _, id := range c.Request().PostArgs().PeekMulti("node") {
		ids = append(ids, string(id))
	}
	switch {
	case !slices.Contains(runbookTraits(r), v.Trait):
		v.Trait, v.TraitError = "", "trait: choose one of runbook "+r.Name+"'s traits ("+strings.Join(runbookTraits(r), ", ")+")."
	case len(ids) == 0:
		v.NodeError = "node: choose at least one node."
	}
	if v.TraitError != "" || v.NodeError != "" {
		return p.runbookNodesPage(c, r, v, 400)
	}
	for _, id := range ids {
		out := views.TraitOutcome{Node: id, Label: id}
		n, err := p.Nodes.Get(ctx, id)
		if err == nil {
			out.Label = label(n)
			had := slices.Contains(n.Traits, v.Trait)
			err = p.Nodes.AddTrait(ctx, n.UUID, v.Trait)
			switch {
			case err == nil && had:
				out.OK, out.Result = true, "already carried "+v.Trait+"."
			case err == nil:
				out.OK, out.Result = true, "added "+v.Trait+"."
			case errs.Status(err) == 403:
				err = errs.Forbidden("%s", p.denied(ctx, "may not add traits to this node", nodes.RuleTraitsSet))
			}
		}
		if err != nil {
			if errs.Status(err) >= 500 {
				return err
			}
			out.Result = "refused: " + err.Error()
		}
		v.Outcomes = append(v.Outcomes, out)
	}
	return p.runbookNodesPage(c, r, v, 200)
}
