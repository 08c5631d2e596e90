package web

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
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

// Admin holds what the admin console's pages need.
type Admin struct {
	DB        *store.DB
	Audit     *audit.Log
	Enforcer  *policies.Enforcer
	Overrides *override.Manager
	// Key signs what a form hands back for the server to trust (the
	// upload a preview showed, a one-time request token): FormKey of the
	// session signing key, so every replica has it.
	Key []byte
}

// FormKey derives the key forms are signed with from the session
// signing key: one key never MACs two kinds of message, so no cookie's
// MAC can pass for a form's.
func FormKey(sessionHash []byte) []byte {
	m := hmac.New(sha256.New, sessionHash)
	m.Write([]byte("anvil-form-signing"))
	return m.Sum(nil)
}

// sign binds parts to the signed-in session that asked for them: an HMAC
// over the purpose, the session's secret id, its principal and parts, so
// a value signed for one session, user or form is worthless in another.
func (p *Portal) sign(c *fiber.Ctx, purpose string, parts ...string) string {
	sess := sessionOf(c)
	m := hmac.New(sha256.New, p.Admin.Key)
	for _, x := range append([]string{purpose, sess.ID, sess.Principal()}, parts...) {
		m.Write([]byte(x))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signed reports whether mac is what sign returns for these parts in
// this session. Without a key nothing is trusted.
func (p *Portal) signed(c *fiber.Ctx, mac, purpose string, parts ...string) bool {
	return len(p.Admin.Key) >= 32 && hmac.Equal([]byte(mac), []byte(p.sign(c, purpose, parts...)))
}

const (
	rulePolicyGet    = "anvil:policy:get"
	rulePolicyUpdate = "anvil:policy:update"
	// revisionsShown bounds the revision list; older ones stay stored.
	revisionsShown = 20
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
	// The matrix's and the rules table's filter: rule names holding the
	// text, ignoring case.
	pp.RuleFilter = strings.TrimSpace(c.Query("rules"))
	for i, r := range rules {
		if pp.RuleFilter == "" || containsFold(r, pp.RuleFilter) {
			pp.MatrixRules, pp.Matrix = append(pp.MatrixRules, r), append(pp.Matrix, allowed[i])
		}
	}
	if pp.RuleFilter != "" {
		pp.Rules = slices.DeleteFunc(pp.Rules, func(r views.PolicyRule) bool { return !containsFold(r.Name, pp.RuleFilter) })
	}
	pp.Roles = policies.KnownRoles()
	for _, x := range policies.Presets() {
		pp.Presets = append(pp.Presets, views.PolicyPreset{Name: x.Name, File: x.File, Title: x.Title, Fits: x.Fits, Text: string(x.Data)})
	}
	pp.CanUpdate = p.Guard.Allowed(c.UserContext(), rulePolicyUpdate, policies.Target{})
	pp.Enabled, pp.Status = p.Admin.Overrides.Enabled, p.Admin.Overrides.Status()
	switch {
	case !pp.Enabled:
		pp.Status = "Overrides are disabled on this server: the default policy is in force, whatever revisions are stored. " +
			"Start anvil serve with --policy-override-enabled to apply them."
	case pp.Status == "":
		pp.Status = "Not yet synced on this replica; it applies the stored revision within 2 seconds."
	}
	revs, err := p.Admin.DB.PolicyOverride.Query().Order(ent.Desc(policyoverride.FieldRevision)).Limit(revisionsShown).All(c.UserContext())
	if err != nil {
		return pp, err
	}
	for _, r := range revs {
		pp.Revisions = append(pp.Revisions, views.PolicyRevision{Revision: r.Revision, By: r.UploadedBy,
			At: r.UploadedAt, Files: slices.Sorted(maps.Keys(r.Files))})
	}
	if len(revs) > 0 {
		pp.Base = revs[0].Revision
	}
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

// policyUpload previews an uploaded zip: it validates it and shows the
// diff of effective rules without changing anything, with a form that
// applies exactly these files (Apply needs a preview first).
func (p *Portal) policyUpload(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, rulePolicyUpdate, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	pp, err := p.policyData(c)
	if err != nil {
		return err
	}
	fh, err := c.FormFile("zip")
	var data []byte
	switch {
	case err != nil:
		pp.PreviewErr = "zip: choose a zip file to upload"
	case fh.Size > override.MaxZipBytes:
		pp.PreviewErr = fmt.Sprintf("zip: %d bytes; at most %d", fh.Size, override.MaxZipBytes)
	default:
		f, err := fh.Open()
		if err != nil {
			return err
		}
		data, err = io.ReadAll(io.LimitReader(f, override.MaxZipBytes+1))
		f.Close()
		if err != nil {
			return err
		}
	}
	if pp.PreviewErr == "" {
		p.preview(c, &pp, data)
	}
	return p.renderPolicy(c, pp)
}

// preview validates an uploaded zip and fills the diff, or the reason it
// would be refused, and the Apply form: the zip itself, and a signature
// binding its bytes and the revision previewed against to this session.
func (p *Portal) preview(c *fiber.Ctx, pp *views.PolicyPage, data []byte) {
	files, err := override.ReadZip(data)
	if err != nil {
		pp.PreviewErr = err.Error()
		return
	}
	rules, err := override.Rules(files)
	if err != nil {
		pp.PreviewErr = err.Error()
		return
	}
	pp.Preview = previewLines(currentOverrides(p.Admin.Enforcer), rules)
	for _, d := range pp.Preview {
		if d.CrossProject {
			pp.CrossProject++
		}
		if strings.Contains(d.Text, override.WideningMark) {
			pp.Widening++
		}
	}
	pp.PreviewZip, pp.PreviewFiles = base64.StdEncoding.EncodeToString(data), files.Names()
	pp.PreviewToken = p.sign(c, purposeApply, zipSum(data), strconv.FormatInt(pp.Base, 10))
}

const purposeApply = "policy-apply"

// previewLines are override.Diff's lines, saying what a rule not
// overridden falls back to (its default, or anyone when that is empty)
// instead of "", each marked when it widens access across projects.
func previewLines(before, after map[string]string) []views.PreviewLine {
	defaults := map[string]string{}
	for _, r := range policies.Defaults() {
		defaults[r.Name] = r.Check
	}
	side := func(set map[string]string, k string) string {
		if v, ok := set[k]; ok {
			if v == "" {
				return `"" (empty: anyone)`
			}
			return strconv.Quote(v)
		}
		d, ok := defaults[k]
		switch {
		case !ok:
			return "(absent: anyone)"
		case d == "":
			return "(default, empty: anyone)"
		}
		return "(default: " + strconv.Quote(d) + ")"
	}
	cross := crossProject(before, after)
	out := []views.PreviewLine{}
	for _, line := range override.Diff(before, after) {
		k, rest, _ := strings.Cut(line, ": ")
		if strings.HasPrefix(rest, `"`) {
			// Rewrite "old" -> "new", keeping Diff's WIDENS note.
			_, note, _ := strings.Cut(rest, "  "+override.WideningMark)
			rest = side(before, k) + " -> " + side(after, k)
			if note != "" {
				rest += "  " + override.WideningMark + note
			}
		}
		out = append(out, views.PreviewLine{Text: k + ": " + rest, CrossProject: cross[k]})
	}
	return out
}

// crossProject names the rules after lets a tenant use across projects
// where before did not: a persona of a project neither owning nor
// leasing the matrix's node newly allowed, or any tenant persona newly
// allowed a rule before allowed to system callers (and the service
// project) only. Either
// hands one tenant's nodes to another, the widening that matters most.
func crossProject(before, after map[string]string) map[string]bool {
	out := map[string]bool{}
	wider, err := policies.Widening(before, after)
	if err != nil {
		return out
	}
	eb, err := policies.New(policies.Defaults(), before)
	if err != nil {
		return out
	}
	personas := map[string]*policies.Principal{}
	for _, ps := range policies.Personas() {
		personas[ps.Name] = ps.Principal
	}
	// The service project's service user acts for the deployment, as
	// system users do: it is no tenant.
	tenant := func(pr *policies.Principal) bool {
		return pr != nil && !pr.System && pr.Project != policies.DefaultServiceProject
	}
	for rule, names := range wider {
		projectBefore := false
		for _, ps := range policies.Personas() {
			if !tenant(ps.Principal) {
				continue
			}
			if ok, err := eb.Decide(ps.Principal, rule, policies.MatrixTarget); !eb.Has(rule) || err == nil && ok {
				projectBefore = true
				break
			}
		}
		for _, n := range names {
			pr := personas[n]
			if !tenant(pr) {
				continue
			}
			if pr.Project != policies.MatrixOwner && pr.Project != policies.MatrixLessee || !projectBefore {
				out[rule] = true
			}
		}
	}
	return out
}

func zipSum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

func (p *Portal) renderPolicy(c *fiber.Ctx, pp views.PolicyPage) error {
	pg, err := p.page(c, "Policy")
	if err != nil {
		return err
	}
	status := 200
	if pp.PreviewErr != "" {
		status = 400
	}
	return render(c, status, views.Policy(pg, pp))
}

// policyApply applies the upload a preview showed. The form carries the
// zip, the revision previewed against and the preview's signature over
// both, for this session: other bytes, another base, or a form taken from
// another user's or session's preview are refused, and nothing is stored.
// Applied once, the base is stale, so a replay is refused too.
func (p *Portal) policyApply(c *fiber.Ctx) error {
	if err := p.Guard.Authorize(c.UserContext(), rulePolicyUpdate, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	// A revision stored here would not apply, yet would the moment
	// overrides were enabled, unreviewed by then: the page offers no
	// Apply, and this refuses one.
	if !p.Admin.Overrides.Enabled {
		return p.policyRefused(c, errs.Conflict("overrides are disabled on this server, so nothing is applied; start anvil serve with --policy-override-enabled to apply one"))
	}
	data, err := base64.StdEncoding.DecodeString(c.FormValue("zip"))
	if err != nil || !p.signed(c, c.FormValue("token"), purposeApply, zipSum(data), c.FormValue("base")) {
		return p.policyRefused(c, errs.BadRequest("zip", "This upload was not previewed; upload it again"))
	}
	files, err := override.ReadZip(data)
	if err != nil {
		return p.policyRefused(c, errs.BadRequest("zip", "zip: %v; upload and preview it again", err))
	}
	return p.commitPolicy(c, files, "")
}

// policyRestore stores an earlier revision's files as a new revision.
func (p *Portal) policyRestore(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if err := p.Guard.Authorize(ctx, rulePolicyUpdate, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	rev, err := strconv.ParseInt(c.Params("rev"), 10, 64)
	if err != nil {
		return p.fail(c, errs.NotFound("Policy revision %s could not be found.", c.Params("rev")))
	}
	old, err := p.Admin.DB.PolicyOverride.Query().Where(policyoverride.Revision(rev)).First(ctx)
	if ent.IsNotFound(err) {
		return p.fail(c, errs.NotFound("Policy revision %d could not be found.", rev))
	}
	if err != nil {
		return err
	}
	files := override.Files{}
	for k, v := range old.Files {
		files[k] = []byte(v)
	}
	return p.commitPolicy(c, files, fmt.Sprintf("restore of revision %d", rev))
}

// policyRevert stores an empty override: the defaults are in force.
func (p *Portal) policyRevert(c *fiber.Ctx) error {
	if err := p.Guard.Authorize(c.UserContext(), rulePolicyUpdate, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	return p.commitPolicy(c, override.Files{}, "revert to defaults")
}

// commitPolicy stores files as the next revision if the stored one is
// still the one the form was made against, applies it here at once, and
// redirects to the policy page (a reload resends nothing).
func (p *Portal) commitPolicy(c *fiber.Ctx, files override.Files, how string) error {
	ctx := c.UserContext()
	base, err := strconv.ParseInt(c.FormValue("base"), 10, 64)
	if err != nil {
		return p.policyRefused(c, errs.BadRequest("base", "base: the revision the form was made against is missing; reload the page"))
	}
	who := policies.PrincipalFrom(ctx).User
	rev, err := override.ApplyChange(ctx, p.Admin.DB, p.Admin.Audit, files, override.Change{Who: who, How: how, Base: &base})
	// Apply on this replica now rather than at the next poll.
	p.Admin.Overrides.Sync(ctx)
	if err != nil {
		return p.policyRefused(c, err)
	}
	stored := fmt.Sprintf("Stored as revision %d", rev)
	if how != "" {
		stored += " (" + how + ")"
	}
	if !p.Admin.Overrides.Enabled {
		return p.flashTo(c, "/admin/policy", stored+", but not applied: overrides are disabled on this server, so the default policy stays in force. "+
			"Start anvil serve with --policy-override-enabled to apply it.")
	}
	return p.flashTo(c, "/admin/policy", stored+"; every replica applies it within 2 seconds.")
}

// policyRefused shows the policy page with why a change was refused.
func (p *Portal) policyRefused(c *fiber.Ctx, err error) error {
	if errs.Status(err) >= 500 {
		return err
	}
	pg, perr := p.page(c, "Policy")
	if perr != nil {
		return perr
	}
	pp, perr := p.policyData(c)
	if perr != nil {
		return perr
	}
	pg.Error = "Refused, nothing changed: " + err.Error()
	return render(c, errs.Status(err), views.Policy(pg, pp))
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
	files, err := p.storedFiles(ctx)
	if err != nil {
		return err
	}
	data, err := zipFiles(files)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="anvil-policy-override.zip"`)
	c.Type("zip")
	return c.Send(data)
}

// storedFiles are the newest stored revision's files (none before the
// first).
func (p *Portal) storedFiles(ctx context.Context) (map[string]string, error) {
	latest, err := p.Admin.DB.PolicyOverride.Query().Order(ent.Desc(policyoverride.FieldRevision)).First(ctx)
	if ent.IsNotFound(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	return maps.Clone(latest.Files), nil
}

// zipFiles packs files, by name, as an upload's zip.
func zipFiles(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		f, err := w.Create(n)
		if err != nil {
			return nil, err
		}
		if _, err := f.Write([]byte(files[n])); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// policyPresetFile downloads a shipped preset as the file to drop into
// policy.d.
func (p *Portal) policyPresetFile(c *fiber.Ctx) error {
	x, ok := policies.PresetNamed(c.Params("name"))
	if !ok {
		return p.fail(c, errs.NotFound("Policy preset %s could not be found.", c.Params("name")))
	}
	if err := p.Guard.Authorize(c.UserContext(), rulePolicyGet, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	c.Set(fiber.HeaderContentDisposition, `attachment; filename="`+x.File+`"`)
	c.Type("yaml")
	return c.Send(x.Data)
}

// policyPresetPreview previews a shipped preset exactly as an upload is
// previewed: the stored override's files with the preset's file added
// (or replacing an earlier copy of it), so applying it keeps every
// override in force. Its diff, its what-if and the Apply form are the
// upload's, and Apply stores and audits it as any revision.
func (p *Portal) policyPresetPreview(c *fiber.Ctx) error {
	ctx := c.UserContext()
	x, ok := policies.PresetNamed(c.Params("name"))
	if !ok {
		return p.fail(c, errs.NotFound("Policy preset %s could not be found.", c.Params("name")))
	}
	if err := p.Guard.Authorize(ctx, rulePolicyUpdate, "policy", "", policies.Target{}); err != nil {
		return p.fail(c, err)
	}
	pp, err := p.policyData(c)
	if err != nil {
		return err
	}
	files, err := p.storedFiles(ctx)
	if err != nil {
		return err
	}
	files[x.File] = string(x.Data)
	data, err := zipFiles(files)
	if err != nil {
		return err
	}
	p.preview(c, &pp, data)
	pp.PreviewOf = x.Title + " (" + x.File + ")"
	return p.renderPolicy(c, pp)
}
