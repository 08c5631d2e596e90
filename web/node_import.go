package web

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/views"
)

// importColumns are the columns a CSV enrolment takes: the one-node
// form's fields (username and password for its login), then the
// driver_info keys of any driver's own fields.
var importColumns = func() []string {
	cols := []string{"name", "bmc_address", "username", "password", "boot_mac", "console", "resource_class", "owner", "lessee"}
	for _, d := range []string{"redfish", "bmclib"} {
		for _, f := range bmcFields[d] {
			if strings.HasSuffix(f.Name, "_verify_ca") || f.Name == "bmclib_system_name" || f.Name == "bmclib_homeassistant_switch" {
				cols = append(cols, f.Name)
			}
		}
	}
	return cols
}()

// importAliases map a CSV column to the form field it fills.
var importAliases = map[string]string{"username": "bmc_username", "password": "bmc_password", "console": "console_interface"}

// maxImportRows bounds one file: each row is a node created in its own
// transaction while the browser waits.
const maxImportRows = 500

// ImportMax is the largest CSV upload the portal reads (the route's body
// limit): maxImportRows rows of a few hundred bytes, and a PEM bundle or
// two.
const ImportMax = 1 << 20

func (p *Portal) importPage(c *fiber.Ctx) error {
	return p.renderImport(c, 200, views.NodeImport{})
}

func (p *Portal) renderImport(c *fiber.Ctx, status int, m views.NodeImport) error {
	ctx := c.UserContext()
	if !p.canEnrol(ctx) {
		return p.fail(c, errs.Forbidden("%s", p.enrolWho(ctx)))
	}
	pg, err := p.page(c, "Enrol nodes from a CSV file")
	if err != nil {
		return err
	}
	m.Columns = importColumns
	return render(c, status, views.ImportPage(pg, m))
}

// importRow is one CSV row read: its line and values by form field.
type importRow struct {
	line   int
	values map[string]string
}

// readImport reads the uploaded CSV: a header row of known columns, then
// rows; a problem with the file as a whole is a 400 sentence.
func readImport(c *fiber.Ctx) ([]importRow, error) {
	fh, err := c.FormFile("csv")
	if err != nil {
		return nil, errs.BadRequest("csv", "choose a CSV file to enrol from")
	}
	f, err := fh.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	header, err := r.Read()
	if err != nil {
		return nil, errs.BadRequest("csv", "the file has no header row naming its columns")
	}
	for i, h := range header {
		header[i] = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		if !slices.Contains(importColumns, header[i]) {
			return nil, errs.BadRequest("csv", "column %q is not one Anvil reads; the columns are %s", h, strings.Join(importColumns, ", "))
		}
	}
	if !slices.Contains(header, "bmc_address") {
		return nil, errs.BadRequest("csv", "the file has no bmc_address column")
	}
	var rows []importRow
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			return nil, errs.BadRequest("csv", "line %d is not CSV: %v", line, err)
		}
		if len(rec) > len(header) {
			return nil, errs.BadRequest("csv", "line %d has %d values; the header names %d columns", line, len(rec), len(header))
		}
		if len(rows) == maxImportRows {
			return nil, errs.BadRequest("csv", "the file has more than %d rows; split it", maxImportRows)
		}
		row := importRow{line: line, values: map[string]string{}}
		for i, v := range rec {
			k := header[i]
			if a, ok := importAliases[k]; ok {
				k = a
			}
			row.values[k] = v
		}
		if strings.TrimSpace(strings.Join(rec, "")) != "" {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return nil, errs.BadRequest("csv", "the file has a header but no rows")
	}
	return rows, nil
}

// importNodes dry-runs or applies a CSV enrolment. The dry run says for
// each row whether it would be created or why not (the same checks as
// the form, the caller's right to enrol for its owner, names taken in
// Anvil or earlier in the file); applying creates each row the same
// checks pass through the nodes service, which audits each.
func (p *Portal) importNodes(c *fiber.Ctx) error {
	ctx := c.UserContext()
	if !p.canEnrol(ctx) {
		return p.fail(c, errs.Forbidden("%s", p.enrolWho(ctx)))
	}
	rows, err := readImport(c)
	if err != nil {
		if errs.Status(err) != 400 {
			return err
		}
		return p.renderImport(c, 400, views.NodeImport{Problem: err.Error()})
	}
	apply := c.FormValue("action") == "apply"
	m := views.NodeImport{Applied: apply}
	names, macs := map[string]int{}, map[string]int{}
	confirmed := map[string]bool{}
	if form, err := c.MultipartForm(); err == nil {
		for _, v := range form.Value["new_project"] {
			confirmed[v] = true
		}
	}
	for _, r := range rows {
		e := readEnrolment(func(k string) string { return r.values[k] })
		row := views.ImportRow{Line: r.line, Name: strings.TrimSpace(r.values["name"]), Address: redacted(r.values["bmc_address"])}
		if e.addr != nil {
			row.Driver = e.addr.Driver
		}
		refused, newProjects, err := p.importCheck(ctx, e, r.line, names, macs)
		if err != nil {
			return err
		}
		for _, pr := range newProjects {
			if !slices.Contains(m.NewProjects, pr) {
				m.NewProjects = append(m.NewProjects, pr)
			}
		}
		switch {
		case refused != "":
			row.Said = "Refused: " + refused
		case apply && !allConfirmed(newProjects, confirmed):
			row.Said = "Not enrolled: project " + strings.Join(newProjects, " and ") + " is new; tick it below to confirm, then enrol again."
		case apply:
			v, err := p.Nodes.Create(ctx, e.in)
			if err != nil {
				if errs.Status(err) >= 500 {
					return err
				}
				row.Said = "Refused: " + err.Error()
				break
			}
			row.Create, row.UUID = true, v.UUID
			row.Said = "Created." + p.bootPort(ctx, v.UUID, e.mac)
		default:
			row.Create = true
			row.Said = "Would be created."
			if len(newProjects) > 0 {
				row.Said += " Project " + strings.Join(newProjects, " and ") + " is new: check the spelling."
			}
		}
		m.Rows = append(m.Rows, row)
	}
	if apply {
		// Confirmed projects are asked about no more.
		m.NewProjects = slices.DeleteFunc(m.NewProjects, func(pr string) bool { return confirmed[pr] })
	}
	return p.renderImport(c, 200, m)
}

// importCheck finds why a row would be refused ("" when it would not),
// and the projects it names that nothing uses yet. names and macs hold
// the lines earlier rows took them on.
func (p *Portal) importCheck(ctx context.Context, e *enrolment, line int, names, macs map[string]int) (string, []string, error) {
	var why []string
	for _, pr := range e.problems {
		why = append(why, pr.Label+": "+pr.Msg)
	}
	if e.in.Name != nil {
		name := *e.in.Name
		if at, ok := names[strings.ToLower(name)]; ok {
			why = append(why, fmt.Sprintf("Name: line %d names a node %s too", at, name))
		} else if _, err := p.Nodes.Get(ctx, name); err == nil {
			why = append(why, "Name: a node named "+name+" exists")
		}
		names[strings.ToLower(name)] = line
	}
	if e.mac != "" {
		if at, ok := macs[e.mac]; ok {
			why = append(why, fmt.Sprintf("Boot MAC address: line %d has %s too", at, e.mac))
		}
		macs[e.mac] = line
	}
	if pr := policies.PrincipalFrom(ctx); len(e.problems) == 0 && !p.mayEnrolFor(ctx, e.in.Owner) && pr != nil && !pr.System {
		// The caller may enrol (the page is theirs), only not for this owner.
		why = append(why, "Owner project: you may enrol only nodes project "+pr.Project+" owns")
	}
	if len(why) > 0 {
		return strings.Join(why, "; ") + ".", nil, nil
	}
	unknown, err := p.unknownProjects(ctx, e.in.Owner, e.in.Lessee)
	return "", unknown, err
}

// allConfirmed reports whether every project of projects was ticked.
func allConfirmed(projects []string, confirmed map[string]bool) bool {
	for _, pr := range projects {
		if !confirmed[pr] {
			return false
		}
	}
	return true
}

// redacted is a BMC address as a page shows it back: a password typed
// into it (which ParseAddress refuses) is not.
func redacted(address string) string {
	address = strings.TrimSpace(address)
	if u, err := url.Parse(address); err == nil && u.User != nil {
		return u.Redacted()
	}
	return address
}
