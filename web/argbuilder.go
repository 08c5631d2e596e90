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
	"github.com/anvilproject/anvil/views"
)

// builderKind is the settings builder a catalogued step gets, or "".
func builderKind(step string) string {
	switch step {
	case "bios.apply_configuration":
		return views.BuilderBIOS
	case "firmware.update":
		return views.BuilderFirmware
	}
	return ""
}

// readBuilder reads row i's builder fields from the form (f reads one).
func readBuilder(kind string, f func(part string) string) *views.ArgBuilder {
	return &views.ArgBuilder{Kind: kind, Ref: f("b.ref"), Name: f("b.name"), Value: f("b.value"),
		Component: f("b.component"), NIC: f("b.nic"), Image: f("b.image"), URL: f("b.url"), Wait: f("b.wait")}
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
