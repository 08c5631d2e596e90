package web

import (
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/views"
)

// blankRows are offered below the existing steps for adding new ones.
const blankRows = 3

func catalogue() []string {
	var out []string
	for _, s := range conductor.Catalogue() {
		out = append(out, s.Interface+"."+s.Step)
	}
	return out
}

// createTarget is what the create rule is checked against: the caller's
// project for a project, no owner for the system.
func createTarget(pr *policies.Principal) policies.Target {
	if pr != nil && !pr.System {
		return policies.Target{RunbookOwner: pr.Project}
	}
	return policies.Target{}
}

func (p *Portal) editorPage(c *fiber.Ctx, e views.Editor, status int) error {
	pg, err := p.page(c, "Runbook editor")
	if err != nil {
		return err
	}
	e.System = pg.System
	e.Catalogue = catalogue()
	for range blankRows {
		e.Steps = append(e.Steps, views.EditorStep{})
	}
	return render(c, status, views.RunbookEditor(pg, e))
}

func (p *Portal) newRunbook(c *fiber.Ctx) error {
	if !p.Guard.Allowed(c.UserContext(), runbooks.RuleCreate, createTarget(policies.PrincipalFrom(c.UserContext()))) {
		return p.fail(c, errs.Forbidden("You may not create runbooks in %s.", policies.PrincipalFrom(c.UserContext()).Scope()))
	}
	return p.editorPage(c, views.Editor{}, 200)
}

func (p *Portal) editRunbook(c *fiber.Ctx) error {
	r, err := p.Runbooks.Get(c.UserContext(), c.Params("name"))
	if err != nil {
		return p.fail(c, err)
	}
	if !p.Guard.Allowed(c.UserContext(), runbooks.RuleUpdate, runbooks.Target(r.Runbook)) {
		return p.fail(c, errs.Forbidden("You may not edit runbook %s.", r.Name))
	}
	e := views.Editor{Existing: r.Name, Name: r.Name, Public: r.Public, Owner: deref(r.Owner)}
	for _, s := range r.Steps {
		args, _ := json.Marshal(s.Args)
		e.Steps = append(e.Steps, views.EditorStep{Order: s.Order, Step: s.Interface + "." + s.Step, Args: string(args)})
	}
	return p.editorPage(c, e, 200)
}

var stepField = regexp.MustCompile(`^steps\[(\d+)\]`)

// saveRunbook reads the editor's rows, creates or patches the runbook,
// and shows any error next to the row or field it concerns.
func (p *Portal) saveRunbook(c *fiber.Ctx) error {
	ctx := c.UserContext()
	existing := c.Params("name")
	pr := policies.PrincipalFrom(ctx)
	// Only the system chooses publishing and owners; the form offers them
	// to system users, and what they chose must reach the service.
	e := views.Editor{Existing: existing, Name: strings.TrimSpace(c.FormValue("name")), Public: c.FormValue("public") == "true",
		Owner: strings.TrimSpace(c.FormValue("owner")), System: pr != nil && pr.System}
	args := c.Request().PostArgs()
	orders, steps, argv := args.PeekMulti("order"), args.PeekMulti("step"), args.PeekMulti("args")
	removed := map[int]bool{}
	for _, v := range args.PeekMulti("remove") {
		if i, err := strconv.Atoi(string(v)); err == nil {
			removed[i] = true
		}
	}
	type row struct {
		index int
		step  runbooks.Step
	}
	var rows []row
	bad := false
	for i := range steps {
		es := views.EditorStep{Step: string(steps[i])}
		if i < len(argv) {
			es.Args = strings.TrimSpace(string(argv[i]))
		}
		if i < len(orders) {
			es.Order, _ = strconv.Atoi(strings.TrimSpace(string(orders[i])))
		}
		if es.Step == "" || removed[i] {
			continue
		}
		e.Steps = append(e.Steps, es)
		idx := len(e.Steps) - 1
		iface, name, _ := strings.Cut(es.Step, ".")
		st := runbooks.Step{Interface: iface, Step: name, Order: es.Order, Args: map[string]any{}}
		if es.Args != "" {
			if err := json.Unmarshal([]byte(es.Args), &st.Args); err != nil {
				e.Steps[idx].Error = "Arguments must be a JSON object, like {\"device\": \"pxe\"}."
				bad = true
			}
		}
		rows = append(rows, row{idx, st})
	}
	if bad {
		return p.editorPage(c, e, 400)
	}
	// Sort as the service will, so its errors' step indexes map to rows.
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].step.Order < rows[j].step.Order })
	var list []runbooks.Step
	for _, r := range rows {
		list = append(list, r.step)
	}
	var (
		err   error
		saved *runbooks.Runbook
	)
	if existing == "" {
		in := runbooks.Input{Name: e.Name, Steps: list}
		if e.System {
			in.Public = e.Public
			if e.Owner != "" {
				in.Owner = &e.Owner
			}
		}
		saved, err = p.Runbooks.Create(ctx, in)
	} else {
		ops := []map[string]any{{"op": "replace", "path": "/name", "value": e.Name}, {"op": "replace", "path": "/steps", "value": list}}
		if e.System {
			var owner any
			if e.Owner != "" && !e.Public {
				owner = e.Owner
			}
			ops = append(ops, map[string]any{"op": "replace", "path": "/public", "value": e.Public}, map[string]any{"op": "replace", "path": "/owner", "value": owner})
		}
		raw, _ := json.Marshal(ops)
		saved, err = p.Runbooks.Patch(ctx, existing, raw)
	}
	if err == nil {
		// The list page says what visibility resulted, by the runbook's id
		// (never by text carried in the URL).
		return c.Redirect("/runbooks?saved="+saved.UUID, fiber.StatusSeeOther)
	}
	if errs.Status(err) >= 500 {
		return err
	}
	field := errs.FieldOf(err)
	if m := stepField.FindStringSubmatch(field); m != nil {
		if i, _ := strconv.Atoi(m[1]); i < len(rows) {
			e.Steps[rows[i].index].Error = err.Error()
			return p.editorPage(c, e, errs.Status(err))
		}
	}
	if field == "name" || strings.Contains(err.Error(), "already exists") {
		e.NameError = err.Error()
	} else {
		e.FormError = err.Error()
	}
	return p.editorPage(c, e, errs.Status(err))
}
