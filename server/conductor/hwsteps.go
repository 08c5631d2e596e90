package conductor

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/biossetting"
	"github.com/anvilproject/anvil/ent/nodescreenshot"
	"github.com/anvilproject/anvil/ent/schema"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/store"
)

// execHardwareStep runs the catalogue's steps beyond power and boot
// device: those that change the machine's own configuration through its
// BMC. It returns the power state it left, if it changed power.
func (c *Conductor) execHardwareStep(ctx context.Context, n *ent.Node, cl bmc.Client, st Step) (string, error) {
	switch st.Interface {
	case "bios":
		b, ok := cl.(bmc.BIOS)
		if !ok {
			return "", fmt.Errorf("driver %s has no BIOS settings", n.Driver)
		}
		var power string
		var err error
		switch st.Step {
		case "apply_configuration":
			power, err = c.applyBIOS(ctx, n, cl, b, settingsArg(st))
		case "factory_reset":
			if err = b.ResetBIOS(ctx); err == nil {
				power, err = c.reboot(ctx, cl)
			}
		case "cache_bios_settings":
		default:
			return "", fmt.Errorf("step %s has no implementation", st.Name())
		}
		c.noteBMC(ctx, n, err)
		if err != nil {
			return power, err
		}
		return power, c.cacheBIOS(ctx, n.ID, b)
	case "firmware":
		if st.Step != "update" {
			break
		}
		fw, ok := cl.(bmc.Firmware)
		if !ok {
			return "", fmt.Errorf("driver %s cannot update firmware", n.Driver)
		}
		power, err := c.updateFirmware(ctx, n, cl, fw, st)
		c.noteBMC(ctx, n, err)
		return power, err
	case "raid":
		power, err := c.execRAID(ctx, n, cl, st)
		c.noteBMC(ctx, n, err)
		return power, err
	case "management":
		err := c.execManagement(ctx, n, cl, st)
		c.noteBMC(ctx, n, err)
		return "", err
	}
	return "", fmt.Errorf("step %s has no implementation", st.Name())
}

func (c *Conductor) reboot(ctx context.Context, cl bmc.Client) (string, error) {
	return bmc.Power(ctx, cl, bmc.Rebooting, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
}

// applyBIOS stages the settings that differ from the current ones,
// reboots so the BIOS takes them, and checks each became current: a BMC
// that accepted a setting it then ignored fails the step, naming it.
// Nothing differing means no reboot.
func (c *Conductor) applyBIOS(ctx context.Context, n *ent.Node, cl bmc.Client, b bmc.BIOS, want map[string]any) (string, error) {
	current, _, err := b.BIOSSettings(ctx)
	if err != nil {
		return "", err
	}
	change := map[string]any{}
	for k, v := range want {
		if cur, ok := current[k]; !ok || !bmc.SameValue(cur, v) {
			change[k] = v
		}
	}
	if len(change) == 0 {
		return "", nil
	}
	if err := b.StageBIOS(ctx, change); err != nil {
		return "", err
	}
	power, err := c.reboot(ctx, cl)
	if err != nil {
		return power, err
	}
	if current, _, err = b.BIOSSettings(ctx); err != nil {
		return power, err
	}
	var wrong []string
	for _, k := range slices.Sorted(maps.Keys(change)) {
		if !bmc.SameValue(current[k], change[k]) {
			wrong = append(wrong, fmt.Sprintf("%s is %v, not %v", k, current[k], change[k]))
		}
	}
	if len(wrong) > 0 {
		return power, fmt.Errorf("after the reboot the BIOS did not take every setting: %s", strings.Join(wrong, "; "))
	}
	return power, nil
}

// cacheBIOS replaces the node's cached BIOS settings with what the BMC
// reports now, current and staged, keeping created_at of settings that
// stay. A staged value for an attribute the BIOS does not report is
// dropped: a BMC stages only attributes it has.
func (c *Conductor) cacheBIOS(ctx context.Context, nodeID int, b bmc.BIOS) error {
	current, pending, err := b.BIOSSettings(ctx)
	if err != nil {
		return err
	}
	return store.WithTx(ctx, c.db, func(tx *ent.Client) error {
		old, err := tx.BiosSetting.Query().Where(biossetting.NodeID(nodeID)).All(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		have := map[string]*ent.BiosSetting{}
		for _, s := range old {
			have[s.Name] = s
			if _, ok := current[s.Name]; !ok {
				if err := tx.BiosSetting.DeleteOne(s).Exec(ctx); err != nil {
					return err
				}
			}
		}
		var add []*ent.BiosSettingCreate
		for _, k := range slices.Sorted(maps.Keys(current)) {
			v := fmt.Sprint(current[k])
			var staged *string
			if p, ok := pending[k]; ok && !bmc.SameValue(p, current[k]) {
				staged = new(fmt.Sprint(p))
			}
			switch s := have[k]; {
			case s == nil:
				add = append(add, tx.BiosSetting.Create().SetNodeID(nodeID).SetName(k).SetValue(v).SetNillablePending(staged))
			case s.Value != v || (s.Pending == nil) != (staged == nil) || (staged != nil && *s.Pending != *staged):
				u := tx.BiosSetting.UpdateOne(s).SetValue(v).SetUpdatedAt(now)
				if staged == nil {
					u.ClearPending()
				} else {
					u.SetPending(*staged)
				}
				if err := u.Exec(ctx); err != nil {
					return err
				}
			}
		}
		return tx.BiosSetting.CreateBulk(add...).Exec(ctx)
	})
}

func (c *Conductor) execManagement(ctx context.Context, n *ent.Node, cl bmc.Client, st Step) error {
	vm, hasVM := cl.(bmc.VirtualMedia)
	bm, hasBM := cl.(bmc.BootModes)
	str := func(k, def string) string {
		if s, ok := st.Args[k].(string); ok {
			return s
		}
		return def
	}
	switch {
	case (st.Step == "attach_virtual_media" || st.Step == "detach_virtual_media") && !hasVM:
		return fmt.Errorf("driver %s has no virtual media", n.Driver)
	case (st.Step == "set_boot_mode" || st.Step == "set_secure_boot") && !hasBM:
		return fmt.Errorf("driver %s cannot set the boot mode", n.Driver)
	}
	switch st.Step {
	case "get_sel":
		return c.readSEL(ctx, n, cl)
	case "screenshot":
		return c.takeScreenshot(ctx, n, cl)
	case "get_post_code":
		r, ok := cl.(bmc.PostCodeReader)
		if !ok {
			return fmt.Errorf("driver %s cannot read the POST code", n.Driver)
		}
		stage, code, err := r.PostCode(ctx)
		if err != nil {
			return err
		}
		return history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Severity: history.Info, Type: "diagnostics",
			Message: fmt.Sprintf("POST code %d (0x%02X): %s.", code, code, stage), Conductor: c.cfg.Name})
	case "clear_event_log", "clear_sel":
		l, ok := cl.(bmc.EventLog)
		if !ok {
			return fmt.Errorf("driver %s has no event log", n.Driver)
		}
		return l.ClearEventLog(ctx)
	case "attach_virtual_media":
		dev, url := str("device_type", "cdrom"), str("image_url", "")
		if err := vm.InsertMedia(ctx, dev, url); err != nil {
			return err
		}
		return c.vmediaChanged(ctx, c.db.Client, n, []string{dev}, url)
	case "detach_virtual_media":
		dev := str("device_type", "")
		if err := vm.EjectMedia(ctx, dev); err != nil {
			return err
		}
		var devs []string
		if dev != "" {
			devs = []string{dev}
		}
		return c.vmediaChanged(ctx, c.db.Client, n, devs, "")
	case "set_boot_mode":
		return bm.SetBootMode(ctx, str("mode", ""))
	case "set_secure_boot":
		on, _ := st.Args["enabled"].(bool)
		return bm.SetSecureBoot(ctx, on)
	}
	return fmt.Errorf("step %s has no implementation", st.Name())
}

// takeScreenshot keeps the console screenshot the BMC gives as the
// node's, replacing the last. The BMC's bytes are kept only if they are
// the image they claim, so the API never serves other content as one.
func (c *Conductor) takeScreenshot(ctx context.Context, n *ent.Node, cl bmc.Client) error {
	s, ok := cl.(bmc.Screenshotter)
	if !ok {
		return fmt.Errorf("driver %s cannot take a console screenshot", n.Driver)
	}
	img, kind, err := s.Screenshot(ctx)
	if err != nil {
		return err
	}
	switch {
	case len(img) > schema.MaxScreenshotBytes:
		return fmt.Errorf("the BMC's screenshot is %d bytes, more than the %d kept", len(img), schema.MaxScreenshotBytes)
	case kind == "png" && bytes.HasPrefix(img, []byte("\x89PNG\r\n\x1a\n")), kind == "jpg" && bytes.HasPrefix(img, []byte{0xff, 0xd8, 0xff}):
	default:
		return fmt.Errorf("the BMC's screenshot is not the %s image it claims", kind)
	}
	err = store.WithTx(ctx, c.db, func(tx *ent.Client) error {
		if _, err := tx.NodeScreenshot.Delete().Where(nodescreenshot.NodeID(n.ID)).Exec(ctx); err != nil {
			return err
		}
		return tx.NodeScreenshot.Create().SetNodeID(n.ID).SetImage(img).SetFileType(kind).Exec(ctx)
	})
	if err != nil {
		return err
	}
	return history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Severity: history.Info, Type: "diagnostics",
		Message: fmt.Sprintf("Console screenshot taken (%s, %d bytes).", kind, len(img)), Conductor: c.cfg.Name})
}

// Screenshot is node ident's last console screenshot, for a caller who
// may see its console.
func (o *Ops) Screenshot(ctx context.Context, ident string) (*ent.NodeScreenshot, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleGetConsole)
	if err != nil {
		return nil, err
	}
	s, err := o.C.db.NodeScreenshot.Query().Where(nodescreenshot.NodeID(n.ID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, errs.NotFound("Node %s has no console screenshot: run the management.screenshot step.", n.UUID)
	}
	return s, err
}

// ScreenshotTaken is when node ident's console screenshot was taken, zero
// when it has none, for a caller who may see its console; the image
// itself is not read.
func (o *Ops) ScreenshotTaken(ctx context.Context, ident string) (time.Time, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleGetConsole)
	if err != nil {
		return time.Time{}, err
	}
	s, err := o.C.db.NodeScreenshot.Query().Where(nodescreenshot.NodeID(n.ID)).Select(nodescreenshot.FieldID, nodescreenshot.FieldCreatedAt).Only(ctx)
	if ent.IsNotFound(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return s.CreatedAt, nil
}

// readSEL records the BMC's event log in the node's history: how many
// entries for every reader of the node, the entries themselves as the
// event's detail, which only system-scope readers see, as with any other
// text a BMC sends.
func (c *Conductor) readSEL(ctx context.Context, n *ent.Node, cl bmc.Client) error {
	r, ok := cl.(bmc.SELReader)
	if !ok {
		return fmt.Errorf("driver %s cannot read the event log", n.Driver)
	}
	entries, err := r.ReadEventLog(ctx)
	if err != nil {
		return err
	}
	return history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Severity: history.Info, Type: "sel",
		Message: fmt.Sprintf("System event log read: %d entries.", len(entries)), Detail: strings.Join(entries, "\n"), Conductor: c.cfg.Name})
}
