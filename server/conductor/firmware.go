package conductor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/firmwarecomponent"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/store"
)

// RuleFirmwareGet guards GET /v1/nodes/{node}/firmware.
const RuleFirmwareGet = "baremetal:node:firmware:get"

// Firmware lists a node's firmware components as inspection and
// firmware.update steps last read them.
func (o *Ops) Firmware(ctx context.Context, ident string) ([]*ent.FirmwareComponent, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleFirmwareGet)
	if err != nil {
		return nil, err
	}
	return o.C.db.FirmwareComponent.Query().Where(firmwarecomponent.NodeID(n.ID)).Order(ent.Asc(firmwarecomponent.FieldComponent)).All(ctx)
}

// readFirmware reads the components' versions and, where the BMC names
// them, their hardware.
func readFirmware(ctx context.Context, fw bmc.Firmware) (map[string]string, map[string]bmc.Identity, error) {
	versions, err := fw.FirmwareVersions(ctx)
	if err != nil {
		return nil, nil, err
	}
	var ids map[string]bmc.Identity
	if fi, ok := fw.(bmc.FirmwareIdentities); ok {
		if ids, err = fi.FirmwareIdentities(ctx); err != nil {
			return nil, nil, err
		}
	}
	return versions, ids, nil
}

// cacheFirmware records the versions the BMC reported. A component seen
// for the first time keeps its version as the initial one, as Ironic
// does; flashed names the components a firmware.update step just wrote,
// whose new version becomes the last flashed.
func (c *Conductor) cacheFirmware(ctx context.Context, nodeID int, versions map[string]string, ids map[string]bmc.Identity, flashed map[string]bool) error {
	return store.WithTx(ctx, c.db, func(tx *ent.Client) error {
		have, err := tx.FirmwareComponent.Query().Where(firmwarecomponent.NodeID(nodeID)).All(ctx)
		if err != nil {
			return err
		}
		byName := map[string]*ent.FirmwareComponent{}
		for _, h := range have {
			byName[h.Component] = h
		}
		now := time.Now()
		for name, v := range versions {
			if v == "" {
				continue
			}
			h, ok := byName[name]
			if !ok {
				id := ids[name]
				cr := tx.FirmwareComponent.Create().SetNodeID(nodeID).SetComponent(name).SetInitialVersion(v).SetCurrentVersion(v).
					SetNillableVendor(id.Vendor).SetNillableModel(id.Model).SetNillableSerialNumber(id.Serial)
				if flashed[name] {
					cr.SetLastVersionFlashed(v)
				}
				if err := cr.Exec(ctx); err != nil {
					return err
				}
				continue
			}
			id := ids[name]
			same := h.CurrentVersion != nil && *h.CurrentVersion == v && eqPtr(h.Vendor, id.Vendor) && eqPtr(h.Model, id.Model) && eqPtr(h.SerialNumber, id.Serial)
			if same && !flashed[name] {
				continue
			}
			up := tx.FirmwareComponent.UpdateOne(h).SetCurrentVersion(v).SetUpdatedAt(now).
				SetNillableVendor(id.Vendor).SetNillableModel(id.Model).SetNillableSerialNumber(id.Serial)
			if flashed[name] {
				up.SetLastVersionFlashed(v)
			}
			if err := up.Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}

func eqPtr(a, b *string) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

// Ironic's [redfish] defaults that shape a firmware update.
const (
	// firmwareOverallTimeout bounds the whole step
	// (firmware_update_overall_timeout).
	firmwareOverallTimeout = 2 * time.Hour
	// bmcVersionWait is how long a flashed BMC may take to report its
	// new version when the setting gives no wait
	// (firmware_update_reboot_delay).
	bmcVersionWait = 5 * time.Minute
	// nicStartingWait is how long a NIC task may stay Starting before
	// the machine is rebooted so that it starts
	// (firmware_update_nic_starting_wait).
	nicStartingWait = 30 * time.Second
	// steadyReads is how many reads in a row must succeed before the BMC
	// counts as back after an update (firmware_update_required_successes).
	steadyReads = 3
)

// bmcAway reports whether err is a BMC that is not answering, or
// answering 5xx, as one does while it restarts after a flash.
func bmcAway(err error) bool {
	var e *bmc.Error
	return errors.As(err, &e) && (e.Kind == bmc.ErrUnreachable || e.Status >= 500)
}

// fwRun is one firmware.update step in progress.
type fwRun struct {
	c    *Conductor
	ctx  context.Context
	cl   bmc.Client
	fw   bmc.Firmware
	poll time.Duration
	// power is the power state the reboots left.
	power string
}

func (r *fwRun) sleep(d time.Duration) error {
	select {
	case <-r.c.ctx.Done():
		return errShutdown
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// call runs fn until it succeeds or fails for another reason than an
// absent BMC, which it waits out for FirmwareUnresponsiveBMCWait. waited
// says whether the BMC was away in between. component names the update
// in the failure: the summary users read carries no Op.
func (r *fwRun) call(component string, fn func() error) (waited bool, err error) {
	wait := r.c.cfg.FirmwareUnresponsiveBMCWait
	var since time.Time
	for {
		err := fn()
		if err == nil || !bmcAway(err) {
			return waited, err
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) >= wait {
			var e *bmc.Error
			errors.As(err, &e)
			return waited, &bmc.Error{Op: "updating " + component + " firmware", Where: e.Where, Kind: bmc.ErrUnreachable, Status: e.Status,
				Message: fmt.Sprintf("the %s firmware update waited %s for it to answer again (--firmware-unresponsive-bmc-wait)", component, wait),
				Said:    e.Said, Detail: e.Detail}
		}
		waited = true
		if err := r.sleep(r.poll); err != nil {
			return waited, err
		}
	}
}

func (r *fwRun) reboot() error {
	p, err := r.c.reboot(r.ctx, r.cl)
	if p != "" {
		r.power = p
	}
	return err
}

// versions reads the versions once the BMC answers steadily: Ironic
// validates that the BMC's resources answer several times in a row
// before it goes on after an update, since a restarting BMC comes and
// goes.
func (r *fwRun) versions(component string) (map[string]string, error) {
	var v map[string]string
	for ok := 0; ok < steadyReads; {
		waited, err := r.call(component, func() (err error) { v, err = r.fw.FirmwareVersions(r.ctx); return err })
		if err != nil {
			return nil, err
		}
		ok++
		if waited {
			ok = 1
		}
		if ok < steadyReads {
			if err := r.sleep(r.poll); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// updateFirmware updates each component in turn as Ironic's redfish
// firmware interface does: it follows the BMC's task, reboots where the
// component needs it (a BIOS as soon as its task starts, since BMCs
// stage BIOS images until the next POST; a NIC after its task, or when
// its task will not start without one), waits for a flashed BMC to
// report its new version, and rides out the BMC going away meanwhile.
// The versions before and after go to the node's history; one unchanged
// after its update is noted there, not failed, as Ironic takes it for
// an update that had nothing to do. A BMC that cannot pull (bmclib's
// vendor providers) is pushed the image from Anvil's store instead, and
// only the vendor's own steps power off, power cycle or reset around it.
func (c *Conductor) updateFirmware(ctx context.Context, n *ent.Node, cl bmc.Client, fw bmc.Firmware, st Step) (string, error) {
	list, _ := st.Args["settings"].([]any)
	before, ids, err := readFirmware(ctx, fw)
	if err != nil {
		return "", err
	}
	// A node never inspected gets its components, with their initial
	// versions, before anything is flashed.
	if err := c.cacheFirmware(ctx, n.ID, before, ids, nil); err != nil {
		return "", err
	}
	push, _ := fw.(bmc.FirmwarePusher)
	r := &fwRun{c: c, ctx: ctx, cl: cl, fw: fw, poll: c.cfg.BMC.PowerPoll}
	if r.poll <= 0 {
		r.poll = time.Second
	}
	deadline := time.Now().Add(firmwareOverallTimeout)
	after := before
	flashed := map[string]bool{}
	for i, x := range list {
		m, _ := x.(map[string]any)
		component, _ := m["component"].(string)
		url, _ := m["url"].(string)
		var wait time.Duration
		if w, ok := m["wait"].(float64); ok {
			wait = time.Duration(w) * time.Second
		}
		op := "updating " + component + " firmware"
		nic := strings.HasPrefix(component, bmc.NICPrefix)
		if _, ok := before[component]; nic && !ok {
			return r.power, fmt.Errorf("%s: the BMC reports no network adapter %s", op, strings.TrimPrefix(component, bmc.NICPrefix))
		}
		var plan bmc.FirmwarePlan
		var task string
		if push != nil {
			plan, task, err = r.push(push, component, url)
		} else {
			task, err = fw.StartFirmwareUpdate(ctx, component, url)
		}
		if err != nil {
			return r.power, err
		}
		flashed[component] = true
		rebooted := false
		var starting time.Time
		for {
			var t bmc.Task
			if _, err := r.call(component, func() (err error) { t, err = fw.FirmwareTask(ctx, task); return err }); err != nil {
				return r.power, err
			}
			if t.Failed() {
				if plan.ResetBMCOnFailure {
					// The vendor's BMC stays in flash mode until reset;
					// the update's failure is what the step reports.
					_ = cl.ResetBMC(ctx)
				}
				// The task's message is the BMC's own text: operators'.
				return r.power, &bmc.Error{Op: op, Kind: bmc.ErrBMC,
					Message: "the " + component + " firmware update ended in " + t.State, Said: t.Message}
			}
			if t.Done() {
				break
			}
			switch {
			case push != nil:
				// A pushed update reboots only when the vendor asks.
				if t.PowerCycle && !rebooted {
					if err := r.reboot(); err != nil {
						return r.power, err
					}
					rebooted = true
				}
			case component == "bios" && !rebooted:
				// The BIOS applies at the next POST: a task left alone
				// stays Pending on iDRAC. Ironic reboots once it starts.
				if err := r.reboot(); err != nil {
					return r.power, err
				}
				rebooted = true
			case nic && !rebooted && t.State == "Starting":
				// Some NICs start flashing only after a reboot.
				if starting.IsZero() {
					starting = time.Now()
				} else if time.Since(starting) >= nicStartingWait {
					if err := r.reboot(); err != nil {
						return r.power, err
					}
					rebooted = true
				}
			}
			if time.Now().After(deadline) {
				return r.power, &bmc.Error{Op: op, Kind: bmc.ErrBMC,
					Message: fmt.Sprintf("the %s firmware update was not done (%d%%) after %s", component, t.Percent, firmwareOverallTimeout), Said: "task state " + t.State}
			}
			if err := r.sleep(r.poll); err != nil {
				return r.power, err
			}
		}
		if plan.ResetBMCAfter {
			if _, err := r.call(component, func() error { return cl.ResetBMC(ctx) }); err != nil {
				return r.power, err
			}
		}
		_, reported := before[component]
		if push != nil && (component != "bmc" || !reported) {
			// The vendor's steps are done; its BMC reports the version it
			// runs, if it reports any, once it answers steadily.
			if wait > 0 {
				if err := r.sleep(wait); err != nil {
					return r.power, err
				}
			}
		} else if component == "bmc" {
			changed, err := r.awaitBMC(before["bmc"], cmp.Or(wait, bmcVersionWait))
			if err != nil {
				return r.power, err
			}
			// Ironic reboots the host after a BMC flash that took before
			// it goes on to the next component; the BMC must answer
			// steadily first, or the reboot would meet it restarting.
			if changed && i < len(list)-1 {
				if _, err := r.versions(component); err != nil {
					return r.power, err
				}
				if err := r.reboot(); err != nil {
					return r.power, err
				}
			}
		} else {
			// A BIOS task that ended before it was seen running (iLO
			// stages at once) still needs its POST; a NIC applies at the
			// next one.
			if !rebooted {
				if err := r.reboot(); err != nil {
					return r.power, err
				}
			}
			// wait is Ironic's pause after the component's update.
			if wait > 0 {
				if err := r.sleep(wait); err != nil {
					return r.power, err
				}
			}
		}
		if after, err = r.versions(component); err != nil {
			return r.power, err
		}
	}
	if err := c.cacheFirmware(ctx, n.ID, after, ids, flashed); err != nil {
		return r.power, err
	}
	var changes []string
	for _, k := range slices.Sorted(maps.Keys(after)) {
		s := fmt.Sprintf("%s %s -> %s", k, before[k], after[k])
		if flashed[k] && before[k] == after[k] {
			s += " (unchanged by its update)"
		}
		changes = append(changes, s)
	}
	for _, k := range slices.Sorted(maps.Keys(flashed)) {
		if _, ok := after[k]; !ok {
			// Said, not guessed: the update ran, its result is unknown.
			changes = append(changes, fmt.Sprintf("%s updated, but %s", k, unreported(n)))
		}
	}
	return r.power, history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Type: "firmware", Conductor: c.cfg.Name,
		Message: "Firmware versions: " + strings.Join(changes, ", ")})
}

// awaitBMC waits up to wait for the flashed BMC to report a version other
// than old, riding out its restart. A version still old then is Ironic's
// no-op update: not an error.
func (r *fwRun) awaitBMC(old string, wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	for {
		var v map[string]string
		if _, err := r.call("bmc", func() (err error) { v, err = r.fw.FirmwareVersions(r.ctx); return err }); err != nil {
			return false, err
		}
		if v["bmc"] != old {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if err := r.sleep(r.poll); err != nil {
			return false, err
		}
	}
}

// unreported says why a node's BMC gave no version for a component.
func unreported(n *ent.Node) string {
	if bmc.Canonical(n.Driver) == "bmclib" {
		p, _ := n.DriverInfo["bmclib_provider"].(string)
		return "bmclib's " + p + " provider reports no version for it"
	}
	return "the BMC reports no version for it"
}

// push sends the image a firmware.update setting names to a BMC that
// cannot pull it: only an image of this Anvil's own store, found by its
// URL (nothing else the URL names is opened or fetched). The host is
// powered off first where the vendor asks.
func (r *fwRun) push(p bmc.FirmwarePusher, component, url string) (bmc.FirmwarePlan, string, error) {
	op := "updating " + component + " firmware"
	path, err := r.c.firmwareImage(url)
	if err != nil {
		return bmc.FirmwarePlan{}, "", fmt.Errorf("%s: url %s", op, err)
	}
	plan, err := p.FirmwarePlan(r.ctx, component)
	if err != nil {
		return plan, "", err
	}
	if plan.PowerOffHost {
		power, err := bmc.Power(r.ctx, r.cl, bmc.PowerOff, r.c.cfg.PowerTimeout, r.c.cfg.BMC.PowerPoll)
		if power != "" {
			r.power = power
		}
		if err != nil {
			return plan, "", err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return plan, "", fmt.Errorf("%s: the firmware image store: %w", op, err)
	}
	defer f.Close()
	task, err := p.PushFirmware(r.ctx, component, f)
	return plan, task, err
}

// firmwareImage finds the stored image url names (fwimages.Store.Local).
func (c *Conductor) firmwareImage(url string) (string, error) {
	if c.cfg.FirmwareImages == nil {
		return "", errors.New("cannot be pushed: this Anvil has no firmware image store")
	}
	return c.cfg.FirmwareImages.Local(url)
}

// firmwareFits checks a bmclib node's firmware.update settings before a
// run starts: each component must be one its provider updates, and each
// url an image of this Anvil's store, the only images Anvil pushes.
func (c *Conductor) firmwareFits(field string, steps []Step, n *ent.Node) error {
	if bmc.Canonical(n.Driver) != "bmclib" {
		return nil
	}
	p, _ := n.DriverInfo["bmclib_provider"].(string)
	for i, s := range steps {
		if s.Name() != "firmware.update" || !bmc.BmclibOffers(p, s.Name()) {
			continue // unsupported and ArgProblems say what is wrong
		}
		list, _ := s.Args["settings"].([]any)
		for j, x := range list {
			m, _ := x.(map[string]any)
			f := fmt.Sprintf("%s[%d].args.settings[%d]", field, i, j)
			comp, _ := m["component"].(string)
			if valid := bmc.BmclibFirmwareComponents(p); !slices.Contains(valid, comp) {
				return errs.BadRequest(f+".component", "%s.component %q: bmclib provider %s updates only %s", f, comp, p, strings.Join(valid, ", "))
			}
			u, _ := m["url"].(string)
			if _, err := c.firmwareImage(u); err != nil {
				if len(u) > 200 {
					u = u[:200] + "…"
				}
				return errs.BadRequest(f+".url", "%s.url %q %v", f, u, err)
			}
		}
	}
	return nil
}
