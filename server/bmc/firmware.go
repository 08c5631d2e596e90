package bmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/stmcginnis/gofish/common"
)

// FirmwareComponents are the components firmware.update names, as
// Ironic's redfish firmware interface names them; network adapters are
// NICPrefix followed by the adapter's serial number (its Id when it has
// none), as Ironic names them.
var FirmwareComponents = []string{"bios", "bmc"}

// NICPrefix starts a network adapter's component name.
const NICPrefix = "nic:"

// Firmware is a BMC that updates firmware from an image URL and reports
// versions.
type Firmware interface {
	// StartFirmwareUpdate starts updating component from url and returns
	// the task to follow.
	StartFirmwareUpdate(ctx context.Context, component, url string) (string, error)
	FirmwareTask(ctx context.Context, task string) (Task, error)
	// FirmwareVersions maps each component to its running version.
	FirmwareVersions(ctx context.Context) (map[string]string, error)
}

// Identity is what a BMC says of a firmware component's hardware beyond
// its version (Ironic's 1.114 fields); nil where it does not say.
type Identity struct{ Vendor, Model, Serial *string }

// FirmwareIdentities is a BMC that names its components' hardware. As
// Ironic's redfish firmware interface, only the BMC's own model is known.
type FirmwareIdentities interface {
	FirmwareIdentities(ctx context.Context) (map[string]Identity, error)
}

func (c *redfishClient) FirmwareIdentities(ctx context.Context) (map[string]Identity, error) {
	out := map[string]Identity{}
	err := c.do(ctx, "reading firmware identities", func() error {
		sys, err := c.system()
		if err != nil {
			return err
		}
		ms, err := sys.ManagedBy()
		if err != nil {
			return err
		}
		if len(ms) > 0 && ms[0].Model != "" {
			model := ms[0].Model
			out["bmc"] = Identity{Model: &model}
		}
		nics, err := c.nics()
		for _, a := range nics {
			out[a.component] = Identity{Vendor: nonEmpty(a.Manufacturer), Model: nonEmpty(a.Model), Serial: nonEmpty(a.SerialNumber)}
		}
		return err
	})
	return out, err
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// FirmwareIdentities on the fake names a synthetic BMC model.
func (f *fake) FirmwareIdentities(context.Context) (map[string]Identity, error) {
	model := "Anvil fake BMC"
	return map[string]Identity{"bmc": {Model: &model}}, nil
}

// networkAdapter is a NetworkAdapter of the system's chassis with a
// firmware version, as Ironic's redfish firmware interface lists them.
type networkAdapter struct {
	component, path, version          string
	ID                                string `json:"Id"`
	SerialNumber, Manufacturer, Model string
	Controllers                       []struct{ FirmwarePackageVersion string }
}

// absent reports whether the BMC answered that a resource is not there,
// which for network adapters means it has none.
func absent(err error) bool {
	var rf *common.Error
	return errors.As(err, &rf) && (rf.HTTPReturnedStatusCode == 404 || rf.HTTPReturnedStatusCode == 405 || rf.HTTPReturnedStatusCode == 501)
}

// nics lists the network adapters of the system's first chassis that
// report a controller firmware version. A BMC without chassis or adapters
// has none, as for Ironic.
func (c *redfishClient) nics() ([]networkAdapter, error) {
	var sys struct {
		Links struct{ Chassis []common.Link }
	}
	if err := c.getJSON(c.sysPath, &sys); err != nil {
		return nil, err
	}
	if len(sys.Links.Chassis) == 0 {
		return nil, nil
	}
	var ch struct{ NetworkAdapters common.Link }
	if err := c.getJSON(sys.Links.Chassis[0].String(), &ch); err != nil || ch.NetworkAdapters == "" {
		if absent(err) {
			err = nil
		}
		return nil, err
	}
	var coll struct{ Members []common.Link }
	if err := c.getJSON(ch.NetworkAdapters.String(), &coll); err != nil {
		if absent(err) {
			err = nil
		}
		return nil, err
	}
	var out []networkAdapter
	for _, m := range coll.Members {
		var a networkAdapter
		if err := c.getJSON(m.String(), &a); err != nil {
			return nil, err
		}
		for _, ctl := range a.Controllers {
			if ctl.FirmwarePackageVersion != "" {
				a.version = ctl.FirmwarePackageVersion
				break
			}
		}
		if a.version == "" {
			continue
		}
		a.path, a.component = m.String(), NICPrefix+a.ID
		if a.SerialNumber != "" {
			a.component = NICPrefix + a.SerialNumber
		}
		out = append(out, a)
	}
	return out, nil
}

// updateTarget is the resource SimpleUpdate's Targets names for a
// component: the system for its BIOS, its manager for the BMC, the
// NetworkAdapter for a NIC.
func (c *redfishClient) updateTarget(component string) (string, error) {
	if component == "bios" {
		return c.sysPath, nil
	}
	if strings.HasPrefix(component, NICPrefix) {
		nics, err := c.nics()
		if err != nil {
			return "", err
		}
		for _, a := range nics {
			if a.component == component {
				return a.path, nil
			}
		}
		return "", &Error{Op: "updating " + component + " firmware", Where: c.where, Kind: ErrUnsupported, Reason: "the system has no such network adapter"}
	}
	sys, err := c.system()
	if err != nil {
		return "", err
	}
	ms, err := sys.ManagedBy()
	if err != nil {
		return "", err
	}
	if len(ms) == 0 {
		return "", &Error{Op: "updating bmc firmware", Where: c.where, Kind: ErrUnsupported, Reason: "the system names no manager"}
	}
	return ms[0].ODataID, nil
}

// relPath is a task reference as a path on the BMC: Location headers and
// TaskMonitors may be absolute URLs.
func relPath(ref string) string {
	u, err := url.Parse(ref)
	if err != nil || u.Path == "" {
		return ref
	}
	if u.RawQuery != "" {
		return u.Path + "?" + u.RawQuery
	}
	return u.Path
}

// StartFirmwareUpdate posts SimpleUpdate and returns what to follow: the
// Location header, else the Task the 202 body is (@odata.id), else the
// body's TaskMonitor, since BMCs answer in each of these ways.
func (c *redfishClient) StartFirmwareUpdate(ctx context.Context, component, url string) (string, error) {
	op := "updating " + component + " firmware"
	var task string
	err := c.do(ctx, op, func() error {
		target, err := c.updateTarget(component)
		if err != nil {
			return err
		}
		us, err := c.api.Service.UpdateService()
		if err != nil {
			return err
		}
		action := us.ODataID + "/Actions/UpdateService.SimpleUpdate"
		resp, err := c.api.Post(action, map[string]any{"ImageURI": url, "Targets": []string{target}, "TransferProtocol": strings.ToUpper(strings.SplitN(url, ":", 2)[0])})
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var body struct {
			ODataID     string `json:"@odata.id"`
			TaskMonitor string
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body)
		for _, ref := range []string{resp.Header.Get("Location"), body.ODataID, body.TaskMonitor} {
			if ref != "" {
				task = relPath(ref)
				return nil
			}
		}
		return &Error{Op: op, Where: c.where, Kind: ErrBMC, Message: "SimpleUpdate returned no task to follow"}
	})
	return task, err
}

// FirmwareTask reads the update's Task or TaskMonitor (readTask).
func (c *redfishClient) FirmwareTask(ctx context.Context, path string) (Task, error) {
	return c.readTask(ctx, "following the firmware update", path)
}

func (c *redfishClient) FirmwareVersions(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := c.do(ctx, "reading firmware versions", func() error {
		sys, err := c.system()
		if err != nil {
			return err
		}
		out["bios"] = sys.BIOSVersion
		ms, err := sys.ManagedBy()
		if err != nil {
			return err
		}
		if len(ms) > 0 {
			out["bmc"] = ms[0].FirmwareVersion
		}
		nics, err := c.nics()
		for _, a := range nics {
			out[a.component] = a.version
		}
		return err
	})
	return out, err
}

// fakeFirmware is the fake machine's firmware, guarded by the fake's lock.
type fakeFirmware struct {
	versions map[string]string
}

func (f *fake) fw() map[string]string {
	if f.firmware.versions == nil {
		f.firmware.versions = map[string]string{"bios": "1.0.0", "bmc": "1.00"}
	}
	return f.firmware.versions
}

// StartFirmwareUpdate on the fake completes at once, bumping the
// version's last number; an image URL containing "fail" fails, as on
// the Redfish simulator.
func (f *fake) StartFirmwareUpdate(_ context.Context, component, url string) (string, error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.Contains(url, "fail") {
		return "fail", nil
	}
	v := f.fw()[component]
	parts := strings.Split(v, ".")
	var last int
	_, _ = fmt.Sscan(parts[len(parts)-1], &last)
	parts[len(parts)-1] = fmt.Sprintf("%0*d", len(parts[len(parts)-1]), last+1)
	f.fw()[component] = strings.Join(parts, ".")
	return "done", nil
}

func (f *fake) FirmwareTask(_ context.Context, task string) (Task, error) {
	if task == "fail" {
		return Task{State: "Exception", Percent: 100, Message: "The image could not be applied."}, nil
	}
	return Task{State: "Completed", Percent: 100}, nil
}

func (f *fake) FirmwareVersions(context.Context) (map[string]string, error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for k, v := range f.fw() {
		out[k] = v
	}
	return out, nil
}
