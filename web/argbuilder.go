package web

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/fwimages"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// builderKind is the settings builder a catalogued step gets, or "".
func builderKind(step string) string {
	switch step {
	case "bios.apply_configuration":
		return views.BuilderBIOS
	case "firmware.update":
		return views.BuilderFirmware
	case "raid.apply_configuration":
		return views.BuilderRAID
	}
	return ""
}

// readBuilder reads row i's builder fields from the form (f reads one).
func readBuilder(kind string, f func(part string) string) *views.ArgBuilder {
	return &views.ArgBuilder{Kind: kind, Ref: f("b.ref"), Name: f("b.name"), Value: f("b.value"),
		Component: f("b.component"), NIC: f("b.nic"), Image: f("b.image"), URL: f("b.url"), Wait: f("b.wait"),
		Disk: views.DiskFields{Size: f("b.size_gb"), Level: f("b.raid_level"), Root: f("b.is_root_volume") == "true",
			VolName: f("b.volume_name"), Controller: f("b.controller"), Physical: f("b.physical_disks"), DiskType: f("b.disk_type"),
			IfaceType: f("b.interface_type"), Count: f("b.number_of_physical_disks"), Share: f("b.share_physical_disks") == "true"}}
}

// fillBuilders gives each builder what it offers: the reference node's
// cached BIOS settings (read as GET /v1/nodes/{node}/bios reads them,
// under its rule), or the uploaded firmware images for those who may
// list them.
func (p *Portal) fillBuilders(ctx context.Context, e *views.Editor) error {
	for i := range e.Steps {
		b := e.Steps[i].Builder
		switch {
		case b == nil:
		case b.Kind == views.BuilderBIOS && b.Ref != "":
			settings, err := p.Ops.BIOS(ctx, b.Ref)
			switch {
			case err != nil && errs.Status(err) >= 500:
				return err
			case errs.Status(err) == 403:
				b.RefError = "Reference node: " + p.denied(ctx, "may not read its BIOS settings", conductor.RuleBIOSGet)
			case err != nil:
				b.RefError = "Reference node: " + err.Error()
			case len(settings) == 0:
				b.RefError = "Reference node: " + b.Ref + " has no cached BIOS settings yet (they are read when the node is inspected or runs a BIOS step); type the setting's name instead."
			}
			for _, s := range settings {
				b.Settings = append(b.Settings, views.BIOSChoice{Name: s.Name, Current: s.Value})
			}
		case b.Kind == views.BuilderRAID:
			b.Levels, b.DiskTypes, b.IfaceTypes = nodes.RAIDLevels, nodes.DiskTypes, nodes.InterfaceTypes
			disks, _ := raidDisks(&e.Steps[i])
			for _, d := range disks {
				b.Disks = append(b.Disks, diskSummary(d))
			}
		case b.Kind == views.BuilderFirmware:
			if p.Firmware == nil || !p.Guard.Allowed(ctx, fwimages.RuleList, policies.Target{}) {
				b.ImagesWhy = p.denied(ctx, "may not list uploaded firmware images", fwimages.RuleList) + " Give the image's URL instead."
				continue
			}
			imgs, err := p.Firmware.List(ctx)
			if err != nil {
				return err
			}
			for _, img := range imgs {
				b.Images = append(b.Images, views.ImageChoice{Name: img.Name, URL: img.URL})
			}
			if len(imgs) == 0 {
				b.ImagesWhy = "No firmware image is uploaded yet; give the image's URL."
			}
		}
	}
	return nil
}

// appendSetting adds the builder's entry to row i's settings list, which
// stays the field that is saved: a BIOS setting replaces one of the same
// name; a firmware component is added after the others, as they update
// in order.
func appendSetting(e *views.Editor, i int) {
	row := &e.Steps[i]
	b := row.Builder
	if b != nil && b.Kind == views.BuilderRAID {
		appendDisk(row)
		return
	}
	j := slices.IndexFunc(row.Args, func(a views.EditorArg) bool { return a.Name == "settings" })
	if b == nil || j < 0 {
		return
	}
	arg := &row.Args[j]
	var list []any
	if v := strings.TrimSpace(arg.Value); v != "" {
		if err := json.Unmarshal([]byte(v), &list); err != nil {
			b.Error = "settings is not a JSON list; correct it (or empty it) before adding."
			return
		}
	}
	var entry map[string]any
	var what string
	switch b.Kind {
	case views.BuilderBIOS:
		if b.Name == "" {
			b.Error = "Setting: choose or type a setting's name."
			return
		}
		entry, what = map[string]any{"name": b.Name, "value": b.Value}, b.Name+" = "+b.Value
		list = slices.DeleteFunc(list, func(x any) bool { m, _ := x.(map[string]any); return m != nil && m["name"] == b.Name })
	case views.BuilderFirmware:
		comp, url := b.Component, b.Image
		if url == "" {
			url = b.URL
		}
		switch {
		case !slices.Contains(bmc.FirmwareComponents, comp) && comp != bmc.NICPrefix:
			b.Error = "Component: choose bios, bmc or nic:."
			return
		case comp == bmc.NICPrefix && b.NIC == "":
			b.Error = "NIC adapter: give the adapter's id or serial number for a nic: component."
			return
		case !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://"):
			b.Error = "Image: choose an uploaded image or give an http:// or https:// URL."
			return
		}
		if comp == bmc.NICPrefix {
			comp += b.NIC
		}
		entry, what = map[string]any{"component": comp, "url": url}, comp
		if b.Wait != "" {
			n, err := strconv.Atoi(b.Wait)
			if err != nil || n < 1 {
				b.Error = "Wait: a whole number of seconds, at least 1."
				return
			}
			entry["wait"] = float64(n)
		}
	}
	list = append(list, entry)
	raw, _ := json.MarshalIndent(list, "", "  ")
	arg.Value = string(raw)
	b.Added = fmt.Sprintf("Added %s to settings below; save the runbook to keep it.", what)
	b.Name, b.Value, b.NIC, b.Image, b.URL, b.Wait = "", "", "", "", "", ""
}

// raidDisks reads the logical disks of row's raid_config field, which
// stays what is saved; an empty field has none. It returns the field.
func raidDisks(row *views.EditorStep) ([]any, *views.EditorArg) {
	j := slices.IndexFunc(row.Args, func(a views.EditorArg) bool { return a.Name == "raid_config" })
	if j < 0 {
		return nil, nil
	}
	arg := &row.Args[j]
	var cfg map[string]any
	if v := strings.TrimSpace(arg.Value); v != "" && json.Unmarshal([]byte(v), &cfg) != nil {
		return nil, nil
	}
	disks, _ := cfg["logical_disks"].([]any)
	return disks, arg
}

// setDisks writes disks back as the row's raid_config (indented, one key
// a line); no disk left empties the field.
func setDisks(arg *views.EditorArg, disks []any) {
	if len(disks) == 0 {
		arg.Value = ""
		return
	}
	raw, _ := json.MarshalIndent(map[string]any{"logical_disks": disks}, "", "  ")
	arg.Value = string(raw)
}

// appendDisk adds the builder's logical disk to row's raid_config, after
// checking the whole configuration as a run would (Ironic's RAID
// schema): a refused field is named by its place in the list, such as
// logical_disks[1].raid_level, and nothing is added. The fields keep
// what was typed until the disk is added.
func appendDisk(row *views.EditorStep) {
	b := row.Builder
	j := slices.IndexFunc(row.Args, func(a views.EditorArg) bool { return a.Name == "raid_config" })
	if j < 0 {
		return
	}
	var cfg map[string]any
	if v := strings.TrimSpace(row.Args[j].Value); v != "" {
		if err := json.Unmarshal([]byte(v), &cfg); err != nil || cfg == nil {
			b.Error = "raid_config is not a JSON object; correct it (or empty it) before adding."
			return
		}
	}
	disks, _ := cfg["logical_disks"].([]any)
	at := fmt.Sprintf("logical_disks[%d].", len(disks))
	d := b.Disk
	disk := map[string]any{"raid_level": d.Level}
	switch n, err := strconv.ParseInt(d.Size, 10, 64); {
	case d.Size == "MAX":
		disk["size_gb"] = "MAX"
	case d.Size == "":
		b.Error, b.ErrorAt = at+"size_gb: give the size in GiB, or MAX for the rest of the space.", "size_gb"
		return
	case err != nil:
		b.Error, b.ErrorAt = at+"size_gb must be a whole number of GiB or MAX.", "size_gb"
		return
	default:
		disk["size_gb"] = float64(n)
	}
	if d.Root {
		disk["is_root_volume"] = true
	}
	if d.Share {
		disk["share_physical_disks"] = true
	}
	for k, v := range map[string]string{"volume_name": d.VolName, "controller": d.Controller, "disk_type": d.DiskType, "interface_type": d.IfaceType} {
		if v != "" {
			disk[k] = v
		}
	}
	if d.Count != "" {
		n, err := strconv.ParseInt(d.Count, 10, 64)
		if err != nil {
			b.Error, b.ErrorAt = at+"number_of_physical_disks must be a whole number, at least 1.", "number_of_physical_disks"
			return
		}
		disk["number_of_physical_disks"] = float64(n)
	}
	if d.Physical != "" {
		var names []any
		for p := range strings.SplitSeq(d.Physical, ",") {
			if p = strings.TrimSpace(p); p != "" {
				names = append(names, p)
			}
		}
		disk["physical_disks"] = names
	}
	next := map[string]any{"logical_disks": append(slices.Clone(disks), disk)}
	if field, why := nodes.RAIDConfigProblem(next); field != "" {
		b.Error = field + " " + why + "."
		if f, ok := strings.CutPrefix(field, at); ok {
			b.ErrorAt = f
		}
		return
	}
	setDisks(&row.Args[j], next["logical_disks"].([]any))
	b.Added = fmt.Sprintf("Added logical disk %d (%s) to raid_config below; save the runbook to keep it.", len(disks)+1, diskSummary(disk))
	b.Disk = views.DiskFields{}
}

// removeDisk is the builder's "Remove" of a logical disk: op names the
// row and the disk's place ("2:1").
func removeDisk(e *views.Editor, op string) {
	a, c, _ := strings.Cut(op, ":")
	i, err1 := strconv.Atoi(a)
	k, err2 := strconv.Atoi(c)
	if err1 != nil || err2 != nil || i < 0 || i >= len(e.Steps) || e.Steps[i].Builder == nil {
		return
	}
	row := &e.Steps[i]
	disks, arg := raidDisks(row)
	if arg == nil || k < 0 || k >= len(disks) {
		return
	}
	gone := diskSummary(disks[k])
	setDisks(arg, slices.Delete(disks, k, k+1))
	row.Builder.Added = fmt.Sprintf("Removed logical disk %d (%s) from raid_config below; save the runbook to keep it.", k+1, gone)
}

// diskSummary is a logical disk in a line: RAID level, size, root.
func diskSummary(x any) string {
	d, _ := x.(map[string]any)
	s := fmt.Sprintf("RAID %v, %v", d["raid_level"], d["size_gb"])
	if d["size_gb"] != "MAX" {
		s += " GiB"
	}
	if name, ok := d["volume_name"].(string); ok {
		s += ", " + name
	}
	if d["is_root_volume"] == true {
		s += ", root volume"
	}
	return s
}
