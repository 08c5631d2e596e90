package api

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/bmc"
	cond "github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
)

// registerFirmware mounts a node's firmware components and virtual
// media. Like Ironic's node sub-controllers they are 404 to a request
// older than the version that added them.
func (a *API) registerFirmware(v1 fiber.Router) {
	v1.Use("/nodes/:node/firmware", subSince(VerFirmwareIface, "node firmware"))
	v1.Get("/nodes/:node/firmware", query("detail", "fields"), a.listFirmware)
	// Every method, PUT included, as Ironic's node lookup refuses vmedia.
	v1.Use("/nodes/:node/vmedia", subSince(VerVMedia, "virtual media"))
	v1.Post("/nodes/:node/vmedia", query(), a.attachVMedia)
	v1.Delete("/nodes/:node/vmedia", query("device_types"), a.detachVMedia)
	v1.Get("/nodes/:node/vmedia", subSince(VerVMediaGet, "getting virtual media"), query(), a.getVMedia)
}

// Ironic's firmware fields: the version fields from 1.86, the identity
// fields from 1.114; created_at and updated_at are always returned.
var (
	firmwareFields         = []string{"component", "initial_version", "current_version", "last_version_flashed"}
	firmwareIdentityFields = []string{"vendor", "model", "serial_number"}
)

func firmwareJSON(f *ent.FirmwareComponent, identity bool) fiber.Map {
	var updated any
	if f.UpdatedAt != nil {
		updated = f.UpdatedAt.UTC().Format(time.RFC3339Nano)
	}
	m := fiber.Map{"component": f.Component, "initial_version": f.InitialVersion, "current_version": f.CurrentVersion,
		"last_version_flashed": f.LastVersionFlashed, "created_at": f.CreatedAt.UTC().Format(time.RFC3339Nano), "updated_at": updated}
	if identity {
		m["vendor"], m["model"], m["serial_number"] = f.Vendor, f.Model, f.SerialNumber
	}
	return m
}

// listFirmware serves GET /v1/nodes/{node}/firmware.
func (a *API) listFirmware(c *fiber.Ctx) error {
	identity := ver(c) >= VerFirmwareIdentity
	if d := c.Query("detail"); d != "" {
		if _, err := strconv.ParseBool(d); err != nil {
			return errs.BadRequest("detail", "detail must be true or false, got %q", d)
		}
	}
	var fields []string
	if raw := c.Query("fields"); raw != "" {
		for f := range strings.SplitSeq(raw, ",") {
			f = strings.TrimSpace(f)
			switch {
			case slices.Contains(firmwareIdentityFields, f) && !identity:
				return errs.BadRequest("fields", "Fields %s are not allowed in this API version. They require at least API version %s.", f, VerFirmwareIdentity)
			case !slices.Contains(firmwareFields, f) && !slices.Contains(firmwareIdentityFields, f) && f != "created_at" && f != "updated_at":
				return errs.BadRequest("fields", "Field(s) %q are not valid", f)
			}
			fields = append(fields, f)
		}
		fields = append(fields, "created_at", "updated_at")
	}
	list, err := a.Ops.Firmware(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, len(list))
	for i, f := range list {
		out[i] = only(firmwareJSON(f, identity), fields)
	}
	return c.JSON(fiber.Map{"firmware": out})
}

// vmediaURLSchemes are the image URL schemes Ironic accepts for virtual
// media.
var vmediaURLSchemes = []string{"http", "https", "nfs", "cifs", "smb"}

// attachVMedia serves POST /v1/nodes/{node}/vmedia. As Ironic, 204 says
// the conductor has the work (AttachVirtualMedia); how it ended is the
// node's last_error and history.
func (a *API) attachVMedia(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleVMediaAttach); err != nil {
		return err
	}
	var in struct {
		DeviceType          string `json:"device_type"`
		ImageURL            string `json:"image_url"`
		ImageDownloadSource string `json:"image_download_source"`
	}
	if err := bind(c, &in); err != nil {
		return err
	}
	if !slices.Contains(bmc.VMediaDevices, in.DeviceType) {
		return errs.BadRequest("device_type", "device_type %q is not one of %s", in.DeviceType, strings.Join(bmc.VMediaDevices, ", "))
	}
	if in.ImageURL == "" {
		return errs.BadRequest("image_url", "image_url is a required property")
	}
	if u, err := url.Parse(in.ImageURL); err != nil || !slices.Contains(vmediaURLSchemes, u.Scheme) {
		scheme := ""
		if err == nil {
			scheme = u.Scheme
		}
		return errs.BadRequest("image_url", "Unsupported or missing URL scheme: %s", scheme)
	}
	// Anvil hands the URL to the BMC as given: "http" is what it does,
	// and "local" (Ironic's default) would need an image cache Anvil
	// does not run, so the BMC fetches from the URL in every case.
	if in.ImageDownloadSource != "" && !slices.Contains([]string{"http", "local", "swift"}, in.ImageDownloadSource) {
		return errs.BadRequest("image_download_source", "image_download_source %q is not one of http, local, swift", in.ImageDownloadSource)
	}
	if err := a.Ops.AttachVirtualMedia(c.UserContext(), c.Params("node"), in.DeviceType, in.ImageURL); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// detachVMedia serves DELETE /v1/nodes/{node}/vmedia[?device_types=a,b].
func (a *API) detachVMedia(c *fiber.Ctx) error {
	if err := a.authorizeFirst(c, cond.RuleVMediaDetach); err != nil {
		return err
	}
	var devices []string
	if raw := c.Query("device_types"); raw != "" {
		var invalid []string
		for d := range strings.SplitSeq(raw, ",") {
			if d = strings.TrimSpace(d); !slices.Contains(bmc.VMediaDevices, d) {
				invalid = append(invalid, d)
			}
			devices = append(devices, d)
		}
		if invalid != nil {
			return errs.BadRequest("device_types", "Invalid device type(s) %s (valid are %s)", strings.Join(invalid, ", "), strings.Join(bmc.VMediaDevices, ", "))
		}
	}
	if err := a.Ops.DetachVirtualMedia(c.UserContext(), c.Params("node"), devices); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// getVMedia serves GET /v1/nodes/{node}/vmedia: the BMC's devices in
// Ironic's words, a list of media_types, inserted and image.
func (a *API) getVMedia(c *fiber.Ctx) error {
	list, err := a.Ops.VirtualMedia(c.UserContext(), c.Params("node"))
	if err != nil {
		return err
	}
	out := make([]fiber.Map, 0, len(list))
	for _, m := range list {
		out = append(out, fiber.Map{"media_types": bmc.MediaTypes(m.Device), "inserted": m.Inserted, "image": m.Image})
	}
	return c.JSON(out)
}
