package web

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/policyoverride"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/audit"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/override"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/views"
)

// Admin holds what the admin console's policy page needs.
type Admin struct {
	DB        *store.DB
	Audit     *audit.Log
	Enforcer  *policies.Enforcer
	Overrides *override.Manager
}

const (
	rulePolicyGet    = "anvil:policy:get"
	rulePolicyUpdate = "anvil:policy:update"
)

func (p *Portal) policyData(c *fiber.Ctx) (views.PolicyPage, error) {
	e := p.Admin.Enforcer
	defaults := map[string]string{}
	for _, r := range policies.Defaults() {
		defaults[r.Name] = r.Check
	}
	var pp views.PolicyPage
	for _, r := range e.Rules() {
		pp.Rules = append(pp.Rules, views.PolicyRule{Name: r.Name, Scopes: strings.Join(r.Scopes, ", "), Default: defaults[r.Name],
			Effective: r.Check, Description: r.Description, Overridden: r.Check != defaults[r.Name]})
	}
	ps := policies.Personas()
	for _, x := range ps {
		pp.Personas = append(pp.Personas, x.Name)
	}
	rules, allowed, err := e.Matrix(ps)
	if err != nil {
		return pp, err
	}
	pp.MatrixRules, pp.Matrix = rules, allowed
	pp.Roles = policies.KnownRoles()
	pp.CanUpdate = p.Guard.Allowed(c.UserContext(), rulePolicyUpdate, policies.Target{})
	return pp, nil
}

func (p *Portal) policyPage(c *fiber.Ctx) error {
	if err := p.Guard.Authorize(c.UserContext(), rulePolicyGet, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, "Policy")
	if err != nil {
		return err
	}
	pp, err := p.policyData(c)
	if err != nil {
		return err
	}
	if c.Query("node") != "" {
		pp.WhatIf = p.whatIf(c)
	}
	return render(c, 200, views.Policy(pg, pp))
}

// whatIf answers which node rules a persona would pass on a real node,
// with the effective policy.
func (p *Portal) whatIf(c *fiber.Ctx) *views.WhatIf {
	w := &views.WhatIf{Role: c.Query("role"), Scope: c.Query("scope"), Project: strings.TrimSpace(c.Query("project")), Node: c.Query("node")}
	if !policies.KnownRole(w.Role) {
		w.Error = "role: choose admin, manager, member, reader or service"
		return w
	}
	pr := &policies.Principal{User: "what-if", Roles: policies.ExpandRoles([]string{w.Role})}
	switch w.Scope {
	case "system":
		pr.System, w.Project = true, ""
	case "project":
		if w.Project == "" {
			w.Error = "project: name the project for a project-scoped persona"
			return w
		}
		pr.Project = w.Project
	default:
		w.Error = "scope: choose project or system"
		return w
	}
	v, err := p.Nodes.Get(c.UserContext(), w.Node)
	if err != nil {
		w.Error = err.Error()
		return w
	}
	t := nodes.Target(v.Node)
	for _, r := range p.Admin.Enforcer.Rules() {
		if !strings.HasPrefix(r.Name, "baremetal:node:") {
			continue
		}
		ok, err := p.Admin.Enforcer.Decide(pr, r.Name, t)
		if err != nil {
			w.Error = err.Error()
			return w
		}
		if ok {
			w.Allowed = append(w.Allowed, r.Name)
		} else {
			w.Denied = append(w.Denied, r.Name)
		}
	}
	return w
}

// policyUpload previews or applies an uploaded zip. A preview validates
// and shows the diff of effective rules without changing anything.
func (p *Portal) policyUpload(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, rulePolicyUpdate, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, "Policy")
	if err != nil {
		return err
	}
	problem := ""
	var files override.Files
	fh, err := c.FormFile("zip")
	if err != nil {
		problem = "zip: choose a zip file to upload"
	} else if fh.Size > override.MaxZipBytes {
		problem = fmt.Sprintf("zip: %d bytes; at most %d", fh.Size, override.MaxZipBytes)
	} else {
		f, err := fh.Open()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(io.LimitReader(f, override.MaxZipBytes+1))
		f.Close()
		if err != nil {
			return err
		}
		if files, err = override.ReadZip(data); err != nil {
			problem = err.Error()
		}
	}
	var preview []string
	applied := ""
	if problem == "" {
		switch c.FormValue("action") {
		case "apply":
			who := pg.User
			rev, err := override.Apply(ctx, p.Admin.DB, p.Admin.Audit, files, who)
			if err != nil {
				if errs.Status(err) >= 500 {
					return err
				}
				problem = err.Error()
			} else {
				applied = fmt.Sprintf("Stored as revision %d; every replica applies it within 2 seconds.", rev)
			}
			// Apply on this replica now rather than at the next poll.
			p.Admin.Overrides.Sync(ctx)
			pg.PolicyStatus = p.Admin.Overrides.Status()
		default:
			rules, err := override.Rules(files)
			if err != nil {
				problem = err.Error()
			} else {
				preview = override.Diff(currentOverrides(p.Admin.Enforcer), rules)
				if preview == nil {
					preview = []string{}
				}
			}
		}
	}
	pp, err := p.policyData(c)
	if err != nil {
		return err
	}
	pp.Preview, pp.PreviewErr, pp.Applied = preview, problem, applied
	for _, d := range preview {
		if strings.Contains(d, override.WideningMark) {
			pp.Widening++
		}
	}
	status := 200
	if problem != "" {
		status = 400
	}
	return render(c, status, views.Policy(pg, pp))
}

// currentOverrides are the effective rules that differ from the defaults.
func currentOverrides(e *policies.Enforcer) map[string]string {
	out := map[string]string{}
	defaults := map[string]string{}
	for _, r := range policies.Defaults() {
		defaults[r.Name] = r.Check
	}
	for k, v := range e.Effective() {
		if defaults[k] != v {
			out[k] = v
		}
	}
	return out
}

func (p *Portal) policySample(c *fiber.Ctx) error {
	if err := p.Guard.Authorize(c.UserContext(), rulePolicyGet, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="anvil-policy-sample.yaml"`)
	c.Type("yaml")
	return c.SendString(policies.Sample(policies.Defaults()))
}

func (p *Portal) policyCurrent(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, rulePolicyGet, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	latest, err := p.Admin.DB.PolicyOverride.Query().Order(ent.Desc(policyoverride.FieldRevision)).First(ctx)
	if err != nil && !ent.IsNotFound(err) {
		return err
	}
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	if latest != nil {
		for _, n := range slices.Sorted(maps.Keys(latest.Files)) {
			f, err := w.Create(n)
			if err != nil {
				return err
			}
			if _, err := f.Write([]byte(latest.Files[n])); err != nil {
				return err
			}
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="anvil-policy-override.zip"`)
	c.Type("zip")
	return c.Send(buf.Bytes())
}
