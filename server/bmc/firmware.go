package bmc

import (
	"context"
	"fmt"
	"strings"
)

// FirmwareComponents are the components firmware.update names, as
// Ironic's redfish firmware interface names them.
var FirmwareComponents = []string{"bios", "bmc"}

// Task is a BMC task's progress.
type Task struct {
	State   string // Redfish TaskState: Running, Completed, Exception, …
	Status  string // Redfish TaskStatus (a Health): OK, Warning, Critical
	Percent int
	Message string // the BMC's last message
}

// Done reports whether the task ended, and Failed whether it ended badly.
func (t Task) Done() bool {
	switch t.State {
	case "Completed", "Exception", "Killed", "Cancelled":
		return true
	}
	return false
}

// Failed reports whether the task ended without completing, or
// completed in a Critical status (Ironic's RAID counts only OK and
// Warning as success).
func (t Task) Failed() bool { return t.Done() && (t.State != "Completed" || t.Status == "Critical") }

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
		return nil
	})
	return out, err
}

// FirmwareIdentities on the fake names a synthetic BMC model.
func (f *fake) FirmwareIdentities(context.Context) (map[string]Identity, error) {
	model := "Anvil fake BMC"
	return map[string]Identity{"bmc": {Model: &model}}, nil
}

// updateTarget is the resource SimpleUpdate's Targets names for a
// component: the system for its BIOS, its manager for the BMC.
func (c *redfishClient) updateTarget(component string) (string, error) {
	if component == "bios" {
		return c.sysPath, nil
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
		task = resp.Header.Get("Location")
		if task == "" {
			return &Error{Op: op, Where: c.where, Kind: ErrBMC, Message: "SimpleUpdate returned no task to follow"}
		}
		return nil
	})
	return task, err
}

func (c *redfishClient) FirmwareTask(ctx context.Context, path string) (Task, error) {
	var t Task
	err := c.do(ctx, "following the firmware update", func() error {
		var raw struct {
			TaskState       string
			PercentComplete int
			Messages        []struct{ Message string }
		}
		if err := c.getJSON(path, &raw); err != nil {
			return err
		}
		t = Task{State: raw.TaskState, Percent: raw.PercentComplete}
		if n := len(raw.Messages); n > 0 {
			t.Message = raw.Messages[n-1].Message
		}
		return nil
	})
	return t, err
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
		return nil
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
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for k, v := range f.fw() {
		out[k] = v
	}
	return out, nil
}
