package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/runbooks"
	"github.com/anvilproject/anvil/views"
)

// catalogued finds a step the editor offers fields for, by interface.step.
func catalogued(name string) (conductor.StepInfo, bool) {
	cat := conductor.Catalogue()
	i := slices.IndexFunc(cat, func(s conductor.StepInfo) bool { return s.Name() == name })
	if i < 0 {
		return conductor.StepInfo{}, false
	}
	return cat[i], true
}

func catalogueNames() []string {
	var out []string
	for _, s := range conductor.Catalogue() {
		out = append(out, s.Name())
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

// forbidden turns the service's 403 into one that says which role and
// rule refused, as the node pages do; other errors pass through.
func (p *Portal) forbidden(ctx context.Context, err error, what, rule string) error {
	if errs.Status(err) == 403 {
		return errs.Forbidden("%s", p.denied(ctx, what, rule))
	}
	return err
}

func (p *Portal) editorPage(c *fiber.Ctx, e views.Editor, status int) error {
	e.Catalogue = catalogueNames()
	e.Preview = preview(e)
	if err := p.fillBuilders(c.UserContext(), &e); err != nil {
		return err
	}
	if c.Get("HX-Request") == "true" {
		return render(c, status, views.EditorSteps(e))
	}
	pg, err := p.page(c, "Runbook editor")
	if err != nil {
		return err
	}
	e.System = pg.System
	return render(c, status, views.RunbookEditor(pg, e))
}

func (p *Portal) newRunbook(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if !p.Guard.Allowed(ctx, runbooks.RuleCreate, createTarget(policies.PrincipalFrom(ctx))) {
		return p.fail(c, errs.Forbidden("%s", p.denied(ctx, "may not create runbooks", runbooks.RuleCreate)))
	}
	return p.editorPage(c, views.Editor{Steps: []views.EditorStep{{}}, Retryable: true}, 200)
}

// editable finds the runbook named in the URL (404 when hidden) and
// checks the update rule (403, saying why).
func (p *Portal) editable(c *fiber.Ctx) (*runbooks.Runbook, error) {
	ctx := c.UserContext()
	r, err := p.Runbooks.Get(ctx, c.Params("name"))
	if err != nil {
		return nil, err
	}
	if err := p.Runbooks.Authorize(ctx, r.UUID, runbooks.RuleUpdate); err != nil {
		return nil, p.forbidden(ctx, err, "may not edit runbook "+r.Name, runbooks.RuleUpdate)
	}
	return r, nil
}

func (p *Portal) editRunbook(c *fiber.Ctx) error {
	r, err := p.editable(c)
	if err != nil {
		return p.fail(c, err)
	}
	e, err := p.editorOf(c, r)
	if err != nil {
		return p.fail(c, err)
	}
	e.Name, e.Public, e.Owner = r.Name, r.Public, deref(r.Owner)
	e.Description, e.Retryable = deref(r.Description), runbooks.Retryable(r.Runbook)
	for _, s := range r.Steps {
		e.Steps = append(e.Steps, storedRow(s))
	}
	return p.editorPage(c, e, 200)
}

// editorOf is the editor for runbook r (nil: a new one) before the form
// is read, with how many nodes it reaches.
func (p *Portal) editorOf(c *fiber.Ctx, r *runbooks.Runbook) (views.Editor, error) {
	if r == nil {
		return views.Editor{}, nil
	}
	n, err := p.carriers(c.UserContext(), r)
	return views.Editor{Existing: r.Name, UUID: r.UUID, Carriers: n, Traits: runbookTraits(r),
		CanDelete: p.Guard.Allowed(c.UserContext(), runbooks.RuleDelete, runbooks.Target(r.Runbook))}, err
}

// preview is what the rows would save, shown as the runbook list shows
// it; rows that cannot be read yet are left out (their errors show when
// saving). It reads copies, so no error lands on the form.
func preview(e views.Editor) []views.StepText {
	tmp := e
	tmp.Steps = slices.Clone(e.Steps)
	for i := range tmp.Steps {
		tmp.Steps[i].Args = slices.Clone(tmp.Steps[i].Args)
	}
	var out []views.StepText
	for i := range tmp.Steps {
		if st, ok := stepOf(&tmp, i); ok {
			out = append(out, stepView(st.Interface, st.Step, st.Args))
		}
	}
	return out
}

// storedRow shows a stored step: fields for a catalogued one, its
// arguments as JSON for any other.
func storedRow(s runbooks.Step) views.EditorStep {
	name := s.Interface + "." + s.Step
	info, ok := catalogued(name)
	for k := range s.Args {
		ok = ok && slices.ContainsFunc(info.Args, func(a conductor.Arg) bool { return a.Name == k })
	}
	if !ok {
		row := views.EditorStep{Step: views.OtherStep, Custom: name}
		if len(s.Args) > 0 {
			raw, _ := json.Marshal(s.Args)
			row.JSON = string(raw)
		}
		return row
	}
	row := views.EditorStep{Step: name, Hint: info.Description}
	if kind := builderKind(name); kind != "" {
		row.Builder = &views.ArgBuilder{Kind: kind}
	}
	for _, a := range info.Args {
		f := argField(a)
		if v, set := s.Args[a.Name]; set {
			switch v := v.(type) {
			case string:
				f.Value = v
			case bool, float64:
				f.Value = fmt.Sprint(v)
			default:
				// Indented, so a list of settings reads one entry a line.
				raw, _ := json.MarshalIndent(v, "", "  ")
				f.Value = string(raw)
			}
		}
		row.Args = append(row.Args, f)
	}
	return row
}

func argField(a conductor.Arg) views.EditorArg {
	return views.EditorArg{Name: a.Name, Type: a.Type, Description: a.Description, Required: a.Required, Choices: a.Choices}
}

// readRows reads the step rows in the order the form shows them. A row's
// fields are named by the position it was rendered at (s3.step); the
// hidden "row" fields give that position, in order.
func readRows(c *fiber.Ctx) []views.EditorStep {
	var out []views.EditorStep
	for _, id := range c.Request().PostArgs().PeekMulti("row") {
		f := func(part string) string { return strings.TrimSpace(c.FormValue("s" + string(id) + "." + part)) }
		row := views.EditorStep{Step: f("step")}
		info, known := catalogued(row.Step)
		switch {
		case known:
			row.Hint = info.Description
			for _, a := range info.Args {
				arg := argField(a)
				arg.Value = f("a." + a.Name)
				row.Args = append(row.Args, arg)
			}
			if kind := builderKind(row.Step); kind != "" {
				row.Builder = readBuilder(kind, f)
			}
		case row.Step == views.OtherStep:
			row.Custom, row.JSON = f("custom"), f("json")
		case row.Step != "":
			// Not a step the list offers (a forged form): kept as typed.
			row.Step, row.Custom, row.JSON = views.OtherStep, row.Step, f("json")
		}
		out = append(out, row)
	}
	return out
}

// rowOp applies a row button (add, remove:i, up:i, down:i, append:i to
// add a settings builder's entry, rmdisk:i:k to remove the RAID
// builder's logical disk k); "refresh"
// changes nothing, as reading the rows already gave each chosen step its
// fields.
func rowOp(e *views.Editor, op string) {
	verb, arg, _ := strings.Cut(op, ":")
	i, err := strconv.Atoi(arg)
	valid := err == nil && i >= 0 && i < len(e.Steps)
	switch {
	case verb == "add" && len(e.Steps) < conductor.MaxSteps:
		e.Steps = append(e.Steps, views.EditorStep{})
	case verb == "add":
		e.StepsError = fmt.Sprintf("A runbook has at most %d steps.", conductor.MaxSteps)
	case verb == "remove" && valid:
		e.Steps = slices.Delete(e.Steps, i, i+1)
	case verb == "up" && valid && i > 0:
		e.Steps[i-1], e.Steps[i] = e.Steps[i], e.Steps[i-1]
	case verb == "down" && valid && i < len(e.Steps)-1:
		e.Steps[i], e.Steps[i+1] = e.Steps[i+1], e.Steps[i]
	case verb == "append" && valid:
		appendSetting(e, i)
	case verb == "rmdisk":
		removeDisk(e, arg)
	}
}

func rowError(e *views.Editor, i int, at, format string, a ...any) {
	s := &e.Steps[i]
	msg := fmt.Sprintf("Step %d: ", i+1) + fmt.Sprintf(format, a...)
	if s.Error != "" {
		s.Error += " "
	} else {
		s.ErrorAt = fmt.Sprintf("s%d-%s", i, at)
	}
	s.Error += msg
}

// stepOf converts row i to a step, typing each argument as the catalogue
// says; a row that cannot be read gets its error and no step.
func stepOf(e *views.Editor, i int) (runbooks.Step, bool) {
	row := &e.Steps[i]
	st := runbooks.Step{Order: i + 1, Args: map[string]any{}}
	switch row.Step {
	case "":
		rowError(e, i, "step", "choose a step, or remove the row.")
		return st, false
	case views.OtherStep:
		iface, name, ok := strings.Cut(row.Custom, ".")
		if !ok || iface == "" || name == "" {
			rowError(e, i, "custom", "name the step as interface.step, like deploy.erase_devices.")
			return st, false
		}
		st.Interface, st.Step = iface, name
		if row.JSON != "" {
			if err := json.Unmarshal([]byte(row.JSON), &st.Args); err != nil || st.Args == nil {
				rowError(e, i, "json", `arguments must be a JSON object, like {"device": "pxe"}.`)
				return st, false
			}
		}
		for _, k := range slices.Sorted(maps.Keys(st.Args)) {
			// Secret arguments come to the editor masked; saving the mask
			// would overwrite the secret with it.
			if runbooks.IsSecret(k) && st.Args[k] == runbooks.Masked {
				rowError(e, i, "json", "argument %s shows %s because it is secret; type its value again.", k, runbooks.Masked)
				return st, false
			}
		}
		return st, true
	}
	st.Interface, st.Step, _ = strings.Cut(row.Step, ".")
	for j := range row.Args {
		a := &row.Args[j]
		v, err := typed(*a)
		switch {
		case err != nil:
			a.Error = fmt.Sprintf("Step %d: argument %s %s.", i+1, a.Name, err)
		case v != nil:
			st.Args[a.Name] = v
		}
	}
	return st, true
}

// typed converts a form value to the catalogue's type for it; nil when
// left empty (so the step's default applies).
func typed(a views.EditorArg) (any, error) {
	v := a.Value
	switch {
	case a.Type == "boolean" && a.Required:
		// A checkbox: unchecked sends nothing, which is false.
		return v == "true", nil
	case v == "":
		return nil, nil
	case a.Type == "boolean":
		if v != "true" && v != "false" {
			return nil, fmt.Errorf("must be true or false")
		}
		return v == "true", nil
	case a.Type == "integer":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("must be a whole number")
		}
		return float64(n), nil // as JSON decodes numbers, which the checks expect
	case a.Type == "string":
		return v, nil
	}
	if strings.HasPrefix(a.Type, "object") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(v), &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("must be a JSON object (%s)", a.Type)
		}
		return obj, nil
	}
	var out []any
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("must be a JSON list (%s)", a.Type)
	}
	return out, nil
}

var stepField = regexp.MustCompile(`^steps\[(\d+)\]\.(.+)$`)

// place shows a service error next to its field: a step's by the row it
// came from (rows[i] is the row of the i-th step sent), renamed from
// steps[i] to the "Step n" the user sees.
func place(e *views.Editor, rows []int, err *errs.Error) {
	m := stepField.FindStringSubmatch(err.Field)
	if m == nil {
		switch err.Field {
		case "name":
			e.NameError = err.Msg
		case "owner":
			e.OwnerError = strings.TrimSpace(e.OwnerError + " " + err.Msg)
		case "steps":
			e.StepsError = err.Msg
		default:
			e.FormError = err.Msg
		}
		return
	}
	idx, _ := strconv.Atoi(m[1])
	if idx >= len(rows) {
		e.FormError = err.Msg
		return
	}
	i := rows[idx]
	msg := strings.TrimPrefix(err.Msg, "steps["+m[1]+"]: ")
	row := &e.Steps[i]
	if name, ok := strings.CutPrefix(m[2], "args."); ok && row.Step != views.OtherStep {
		if j := slices.IndexFunc(row.Args, func(a views.EditorArg) bool { return a.Name == name }); j >= 0 {
			if row.Args[j].Error == "" { // a value that could not be typed already says so
				row.Args[j].Error = fmt.Sprintf("Step %d: %s", i+1, msg)
			}
			return
		}
	}
	at := "step"
	switch {
	case row.Step == views.OtherStep && strings.HasPrefix(m[2], "args."):
		at = "json"
	case row.Step == views.OtherStep:
		at = "custom"
	}
	rowError(e, i, at, "%s", msg)
}

// saveRunbook serves the editor's form: a row button changes the rows
// and shows them again; Save checks every field and every row, shows
// each problem next to its field, and saves only when there is none.
func (p *Portal) saveRunbook(c *fiber.Ctx) error {
	ctx := c.UserContext()
	pr := policies.PrincipalFrom(ctx)
	var r *runbooks.Runbook
	if c.Params("name") == "" {
		if err := p.Runbooks.AuthorizeCreate(ctx); err != nil {
			return p.fail(c, p.forbidden(ctx, err, "may not create runbooks", runbooks.RuleCreate))
		}
	} else {
		var err error
		if r, err = p.editable(c); err != nil {
			return p.fail(c, err)
		}
	}
	e, err := p.editorOf(c, r)
	if err != nil {
		return p.fail(c, err)
	}
	// Only the system chooses publishing and owners; the form offers them
	// to system users, and the service refuses them from anyone else.
	e.System = pr != nil && pr.System
	e.Name, e.Description = strings.TrimSpace(c.FormValue("name")), strings.TrimSpace(c.FormValue("description"))
	e.Public, e.Owner = c.FormValue("public") == "true", strings.TrimSpace(c.FormValue("owner"))
	e.Retryable = c.FormValue("retryable") == "true"
	e.Steps = readRows(c)
	op := c.FormValue("op")
	if op != "" && op != "save" && op != opSaveAnyway {
		rowOp(&e, op)
		return p.editorPage(c, e, 200)
	}

	var list []runbooks.Step
	var rows []int // the row each step of list came from
	rowsOK := true
	for i := range e.Steps {
		st, ok := stepOf(&e, i)
		rowsOK = rowsOK && ok
		if ok {
			list, rows = append(list, st), append(rows, i)
		}
	}
	in := runbooks.Input{Name: e.Name, Steps: list}
	if !e.Retryable {
		in.Extra = map[string]any{runbooks.RetryableKey: false}
	}
	if e.Description != "" {
		in.Description = &e.Description
	}
	if e.System {
		in.Public = e.Public
		if e.Owner != "" && !e.Public {
			in.Owner = &e.Owner
		}
	}
	for _, problem := range runbooks.Problems(in) {
		if problem.Field == "steps" && !rowsOK {
			continue // "no steps" when every row has its own error
		}
		place(&e, rows, problem)
	}
	// A runbook without a traits list runs on nodes that carry its name
	// as a trait (the editor writes none), so a name that is no trait
	// would save a runbook no node can ever run.
	if e.NameError == "" && (r == nil || len(r.Traits) == 0) {
		if err := nodes.ValidateTrait(in.Name); err != nil {
			place(&e, rows, errs.BadRequest("name", "%s", traitNameAdvice(in.Name)))
		}
	}
	// Arguments a step would refuse when a run starts are warnings: the
	// API stores the runbook with them, as Ironic does (a runbook written
	// for another release or driver), so the editor shows them next to
	// their fields and saves on "Save anyway". Everything else blocks.
	blocked := len(e.Problems()) > 0 || e.FormError != ""
	warnings := runbooks.ArgProblems(in)
	if blocked || op != opSaveAnyway {
		for _, problem := range warnings {
			place(&e, rows, problem)
		}
	}
	if blocked {
		return p.editorPage(c, e, 400)
	}
	if len(warnings) > 0 && op != opSaveAnyway {
		e.SaveAnyway = true
		return p.editorPage(c, e, 400)
	}

	var saved *runbooks.Runbook
	if r == nil {
		saved, err = p.Runbooks.Create(ctx, in)
	} else {
		saved, err = p.Runbooks.Patch(ctx, r.UUID, editPatch(r, in, e.System), true)
	}
	if err == nil {
		// The list page says what visibility resulted, by the runbook's id
		// (never by text carried in the URL).
		return c.Redirect("/runbooks?saved="+saved.UUID, fiber.StatusSeeOther)
	}
	var bad *errs.Error
	switch {
	case errs.Status(err) >= 500:
		return err
	case errs.Status(err) == 409:
		e.NameError = err.Error()
	case errs.Status(err) == 400 && errors.As(err, &bad):
		place(&e, rows, bad)
	default:
		e.FormError = err.Error()
	}
	return p.editorPage(c, e, errs.Status(err))
}

// traitNameAdvice says why name cannot gate a runbook, with the custom
// trait it could be.
func traitNameAdvice(name string) string {
	custom := "CUSTOM_" + strings.TrimPrefix(strings.ToUpper(nonTrait.ReplaceAllString(name, "_")), "CUSTOM_")
	return fmt.Sprintf("%q is not a trait a node can carry, so no node could run this runbook: name it as a custom trait, such as %s (CUSTOM_ and then capitals, digits and _), or as a standard trait", name, custom)
}

// nonTrait matches what a custom trait may not hold.
var nonTrait = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// opSaveAnyway is the editor's button that saves a runbook whose steps
// have argument problems (runbooks.ArgProblems) after it has shown them.
const opSaveAnyway = "save-anyway"

// editPatch is the JSON patch that makes runbook r what the form says.
// An empty description is null, as the API shows a runbook without one.
// Retryable touches only its key of extra, which keeps what API clients
// put there: unchecked writes the opt-out (false), checked removes it
// (retryable is the default).
func editPatch(r *runbooks.Runbook, in runbooks.Input, system bool) []byte {
	ops := []map[string]any{{"op": "replace", "path": "/name", "value": in.Name}, {"op": "replace", "path": "/steps", "value": in.Steps},
		{"op": "add", "path": "/description", "value": in.Description}}
	retryPath := "/extra/" + runbooks.RetryableKey
	_, had := r.Extra[runbooks.RetryableKey]
	switch {
	case in.Extra[runbooks.RetryableKey] == false && r.Extra == nil:
		ops = append(ops, map[string]any{"op": "add", "path": "/extra", "value": in.Extra})
	case in.Extra[runbooks.RetryableKey] == false:
		ops = append(ops, map[string]any{"op": "add", "path": retryPath, "value": false})
	case had:
		ops = append(ops, map[string]any{"op": "remove", "path": retryPath})
	}
	if system {
		var owner any
		if in.Owner != nil {
			owner = *in.Owner
		}
		ops = append(ops, map[string]any{"op": "replace", "path": "/public", "value": in.Public}, map[string]any{"op": "replace", "path": "/owner", "value": owner})
	}
	raw, _ := json.Marshal(ops)
	return raw
}

// deleteRunbook is DELETE /v1/runbooks/{name} for the browser: the same
// service call, so the same 404 for a runbook the viewer may not see, 403
// for one it may not delete, and the same audit record. A node running
// the runbook keeps the steps it took when the run started, as with the
// API.
func (p *Portal) deleteRunbook(c *fiber.Ctx) error {
	ctx := c.UserContext()
	r, err := p.Runbooks.Get(ctx, c.Params("name"))
	if err == nil {
		err = p.forbidden(ctx, p.Runbooks.Delete(ctx, r.UUID), "may not delete runbook "+r.Name, runbooks.RuleDelete)
	}
	if err != nil {
		return p.fail(c, err)
	}
	return p.flashTo(c, "/runbooks", "Deleted runbook "+r.Name+".")
}
