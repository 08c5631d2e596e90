package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/stmcginnis/gofish/common"
	"github.com/stmcginnis/gofish/redfish"
)

// BIOS is a BMC that reads and stages BIOS settings. Staged settings
// take effect at the machine's next reset, as on Redfish BMCs; the
// caller reboots and reads them back.
type BIOS interface {
	// BIOSSettings returns the current attributes and those staged for
	// the next reset that differ from them.
	BIOSSettings(ctx context.Context) (current, pending map[string]any, err error)
	// StageBIOS stages attributes for the next reset.
	StageBIOS(ctx context.Context, attrs map[string]any) error
	// ResetBIOS stages the vendor's defaults for the next reset.
	ResetBIOS(ctx context.Context) error
}

// SameValue compares BIOS values as text: a BMC may answer 30 or "30",
// true or "true", for what was sent either way.
func SameValue(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func (c *redfishClient) bios() (*redfish.Bios, error) {
	sys, err := c.system()
	if err != nil {
		return nil, err
	}
	b, err := sys.Bios()
	if err == nil && b == nil {
		err = &Error{Op: "reading BIOS settings", Where: c.where, Kind: ErrUnsupported, Reason: "the system has no Bios resource"}
	}
	return b, err
}

// getJSON reads a resource gofish has no type for, or whose links it
// keeps to itself (Bios's @Redfish.Settings).
func (c *redfishClient) getJSON(path string, out any) error {
	resp, err := c.api.Get(path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c *redfishClient) BIOSSettings(ctx context.Context) (current, pending map[string]any, err error) {
	err = c.do(ctx, "reading BIOS settings", func() error {
		b, err := c.bios()
		if err != nil {
			return err
		}
		var raw struct {
			Attributes map[string]any
			Settings   struct {
				SettingsObject common.Link
			} `json:"@Redfish.Settings"`
		}
		if err := c.getJSON(b.ODataID, &raw); err != nil {
			return err
		}
		current, pending = raw.Attributes, map[string]any{}
		if current == nil {
			current = map[string]any{}
		}
		where := raw.Settings.SettingsObject.String()
		if where == "" || where == b.ODataID {
			return nil
		}
		var staged struct{ Attributes map[string]any }
		if err := c.getJSON(where, &staged); err != nil {
			return err
		}
		for k, v := range staged.Attributes {
			if cur, ok := current[k]; !ok || !SameValue(cur, v) {
				pending[k] = v
			}
		}
		return nil
	})
	return current, pending, err
}

func (c *redfishClient) StageBIOS(ctx context.Context, attrs map[string]any) error {
	return c.do(ctx, "staging BIOS settings", func() error {
		b, err := c.bios()
		if err != nil {
			return err
		}
		var at common.ApplyTime
		if slices.Contains(b.AllowedAttributeUpdateApplyTimes(), common.OnResetApplyTime) {
			at = common.OnResetApplyTime
		}
		return b.UpdateBiosAttributesApplyAt(redfish.SettingsAttributes(attrs), at)
	})
}

func (c *redfishClient) ResetBIOS(ctx context.Context) error {
	return c.do(ctx, "resetting BIOS settings to defaults", func() error {
		b, err := c.bios()
		if err != nil {
			return err
		}
		return b.ResetBios()
	})
}

// fakeBIOSDefaults are the fake machine's BIOS, a few of a real one's.
var fakeBIOSDefaults = map[string]any{
	"BootMode": "Uefi", "ProcTurboMode": "Enabled", "ProcVirtualization": "Enabled",
	"LogicalProc": "Enabled", "SriovEnable": "Disabled", "SysProfile": "PerfPerWattOptimizedDapc",
	"MemTest": "Disabled", "QuietBoot": true, "PowerOnDelaySec": float64(0),
}

// fakeBIOS is the fake machine's BIOS, guarded by the fake's lock.
type fakeBIOS struct {
	current, pending map[string]any
}

// reset applies what is staged, as a BIOS does at boot.
func (b *fakeBIOS) reset() {
	if b.current == nil {
		b.current = maps.Clone(fakeBIOSDefaults)
	}
	maps.Copy(b.current, b.pending)
	b.pending = nil
}

func (f *fake) BIOSSettings(context.Context) (current, pending map[string]any, err error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bios.current == nil {
		f.bios.current = maps.Clone(fakeBIOSDefaults)
	}
	return maps.Clone(f.bios.current), maps.Clone(f.bios.pending), nil
}

func (f *fake) StageBIOS(_ context.Context, attrs map[string]any) error {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bios.pending == nil {
		f.bios.pending = map[string]any{}
	}
	maps.Copy(f.bios.pending, attrs)
	return nil
}

func (f *fake) ResetBIOS(context.Context) error {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bios.pending = maps.Clone(fakeBIOSDefaults)
	return nil
}
