package bmc

import (
	"context"
	"fmt"
	"slices"

	"github.com/stmcginnis/gofish/redfish"
)

// VMedia is one virtual media device, in Ironic's words.
type VMedia struct {
	Device   string `json:"device_type"` // cdrom, floppy
	Image    string `json:"image_url"`
	Inserted bool   `json:"inserted"`
}

// VMediaDevices are the devices an image can be inserted into.
var VMediaDevices = []string{"cdrom", "floppy"}

// VirtualMedia is a BMC that inserts images into virtual drives.
type VirtualMedia interface {
	VirtualMedia(ctx context.Context) ([]VMedia, error)
	// InsertMedia inserts the image at url (which the BMC downloads).
	InsertMedia(ctx context.Context, device, url string) error
	// EjectMedia ejects device, or every inserted one for "".
	EjectMedia(ctx context.Context, device string) error
}

// BootModes is a BMC that reads and sets the boot mode and UEFI secure
// boot.
type BootModes interface {
	// BootMode is "uefi" or "bios" ("" when the BMC does not say), and
	// whether secure boot is on (nil when the BMC has no SecureBoot).
	BootMode(ctx context.Context) (mode string, secure *bool, err error)
	SetBootMode(ctx context.Context, mode string) error
	SetSecureBoot(ctx context.Context, on bool) error
}

var vmediaTypes = map[string][]redfish.VirtualMediaType{
	"cdrom":  {redfish.CDMediaType, redfish.DVDMediaType},
	"floppy": {redfish.FloppyMediaType, redfish.USBStickMediaType},
}

// MediaTypes are the Redfish media types of device, as Ironic reports a
// device's media_types.
func MediaTypes(device string) []string {
	out := []string{}
	for _, t := range vmediaTypes[device] {
		out = append(out, string(t))
	}
	return out
}

func deviceOf(v *redfish.VirtualMedia) string {
	for dev, types := range vmediaTypes {
		for _, t := range v.MediaTypes {
			if slices.Contains(types, t) {
				return dev
			}
		}
	}
	return ""
}

// vmedia lists the system's virtual media, or its manager's where the
// system has none (Redfish allows either).
func (c *redfishClient) vmedia() ([]*redfish.VirtualMedia, error) {
	sys, err := c.system()
	if err != nil {
		return nil, err
	}
	vm, err := sys.VirtualMedia()
	if err == nil && len(vm) > 0 {
		return vm, nil
	}
	ms, err := sys.ManagedBy()
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if vm, err := m.VirtualMedia(); err == nil && len(vm) > 0 {
			return vm, nil
		}
	}
	return nil, &Error{Op: "reading virtual media", Where: c.where, Kind: ErrUnsupported, Reason: "the BMC lists no virtual media"}
}

func (c *redfishClient) VirtualMedia(ctx context.Context) ([]VMedia, error) {
	var out []VMedia
	err := c.do(ctx, "reading virtual media", func() error {
		out = nil
		vms, err := c.vmedia()
		if err != nil {
			return err
		}
		for _, v := range vms {
			if dev := deviceOf(v); dev != "" {
				out = append(out, VMedia{Device: dev, Image: v.Image, Inserted: v.Inserted})
			}
		}
		return nil
	})
	return out, err
}

func (c *redfishClient) InsertMedia(ctx context.Context, device, url string) error {
	op := "inserting virtual media " + device
	return c.do(ctx, op, func() error {
		vms, err := c.vmedia()
		if err != nil {
			return err
		}
		for _, v := range vms {
			if deviceOf(v) != device {
				continue
			}
			if v.Inserted {
				// A BMC refuses an insert over an inserted image.
				if err := v.EjectMedia(); err != nil {
					return err
				}
			}
			return v.InsertMedia(url, true, true)
		}
		return &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "the BMC has no " + device + " virtual media"}
	})
}

func (c *redfishClient) EjectMedia(ctx context.Context, device string) error {
	return c.do(ctx, "ejecting virtual media", func() error {
		vms, err := c.vmedia()
		if err != nil {
			return err
		}
		for _, v := range vms {
			if (device == "" || deviceOf(v) == device) && v.Inserted {
				if err := v.EjectMedia(); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func (c *redfishClient) BootMode(ctx context.Context) (mode string, secure *bool, err error) {
	err = c.do(ctx, "reading the boot mode", func() error {
		sys, err := c.system()
		if err != nil {
			return err
		}
		switch sys.Boot.BootSourceOverrideMode {
		case redfish.UEFIBootSourceOverrideMode:
			mode = "uefi"
		case redfish.LegacyBootSourceOverrideMode:
			mode = "bios"
		}
		if sb, err := sys.SecureBoot(); err == nil && sb != nil {
			on := sb.SecureBootEnable
			secure = &on
		}
		return nil
	})
	return mode, secure, err
}

func (c *redfishClient) SetBootMode(ctx context.Context, mode string) error {
	m := map[string]redfish.BootSourceOverrideMode{"uefi": redfish.UEFIBootSourceOverrideMode, "bios": redfish.LegacyBootSourceOverrideMode}[mode]
	if m == "" {
		return errUnsupported("setting boot mode "+mode, c.where)
	}
	return c.do(ctx, "setting boot mode "+mode, func() error {
		resp, err := c.api.Patch(c.sysPath, map[string]any{"Boot": map[string]any{"BootSourceOverrideMode": m}})
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}

func (c *redfishClient) SetSecureBoot(ctx context.Context, on bool) error {
	op := fmt.Sprintf("setting secure boot %t", on)
	return c.do(ctx, op, func() error {
		sys, err := c.system()
		if err != nil {
			return err
		}
		sb, err := sys.SecureBoot()
		if err != nil {
			return err
		}
		if sb == nil {
			return &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "the system has no SecureBoot resource"}
		}
		resp, err := c.api.Patch(sb.ODataID, map[string]any{"SecureBootEnable": on})
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}

// fakeMedia is the fake machine's virtual drives and boot mode, guarded
// by the fake's lock.
type fakeMedia struct {
	images map[string]string // device -> image URL
	mode   string
	secure bool
}

func (f *fake) VirtualMedia(context.Context) ([]VMedia, error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []VMedia
	for _, d := range VMediaDevices {
		img := f.media.images[d]
		out = append(out, VMedia{Device: d, Image: img, Inserted: img != ""})
	}
	return out, nil
}

func (f *fake) InsertMedia(_ context.Context, device, url string) error {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.media.images == nil {
		f.media.images = map[string]string{}
	}
	f.media.images[device] = url
	return nil
}

func (f *fake) EjectMedia(_ context.Context, device string) error {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	if device == "" {
		f.media.images = nil
	} else {
		delete(f.media.images, device)
	}
	return nil
}

func (f *fake) BootMode(context.Context) (string, *bool, error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.media.mode == "" {
		f.media.mode = "uefi"
	}
	s := f.media.secure
	return f.media.mode, &s, nil
}

func (f *fake) SetBootMode(_ context.Context, mode string) error {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.media.mode = mode
	return nil
}

func (f *fake) SetSecureBoot(_ context.Context, on bool) error {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.media.secure = on
	return nil
}
