package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
)

// RAIDLevels maps the RAID levels a Redfish BMC builds, in Ironic's
// notation, to Redfish's RAIDType (ironic/drivers/modules/redfish/raid.py
// RAID_LEVELS).
var RAIDLevels = map[string]string{
	"0": "RAID0", "1": "RAID1", "5": "RAID5", "6": "RAID6",
	"1+0": "RAID10", "5+0": "RAID50", "6+0": "RAID60",
}

// minDisks is the fewest drives each level is built from, as Ironic's
// RAID_LEVELS (a spanned level has at least two spans of its span type).
var minDisks = map[string]int{"0": 1, "1": 2, "5": 3, "6": 4, "1+0": 4, "5+0": 6, "6+0": 8}

// volumeTypes maps Redfish's older VolumeType, which BMCs predating
// RAIDType (and the simulator) report alone, to the level it names.
var volumeTypes = map[string]string{
	"NonRedundant": "0", "Mirrored": "1", "StripedWithParity": "5",
	"SpannedMirrors": "1+0", "SpannedStripesWithParity": "5+0",
}

// gib is Ironic's unit for size_gb.
const gib = 1 << 30

// VolumeSpec is one logical disk to build, from a target_raid_config
// entry.
type VolumeSpec struct {
	Level  string // Ironic's raid_level, a key of RAIDLevels
	SizeGB int64  // 0: the largest the drives allow ("MAX")
	Name   string // "" lets the BMC name it
	// Controller is the Storage resource's Id; "" picks the first one
	// with drives.
	Controller string
	// Drives are drive Ids; none picks the controller's first Disks, or
	// the fewest the level needs.
	Drives []string
	Disks  int
}

// Volume is a logical disk as the BMC reports it.
type Volume struct {
	ID, Name   string
	Controller string // the Storage resource's Id
	Level      string // "" when the BMC reports no level Anvil knows
	SizeBytes  int64
	path       string // the BMC's @odata.id, where DeleteVolume sends
	// applyTime is what DeleteVolume asks for, from the collection's
	// @Redfish.OperationApplyTimeSupport.
	applyTime string
}

// Apply times a Redfish volume collection may support
// (@Redfish.OperationApplyTimeSupport), of those Ironic uses.
const (
	ApplyImmediate = "Immediate"
	ApplyOnReset   = "OnReset"
)

// Pending is what the BMC made of a create or delete: done when it
// answered, or a task (a Redfish task monitor or Task, or a Dell Job) to
// follow, which waits for a reset unless it applies at once.
type Pending struct {
	// Volume is the new volume's Id when the BMC's Location named a
	// Volume of the collection; "" otherwise, and the volume is then
	// known by reading the collection again once the work is done.
	Volume string
	// Controller is the Storage resource's Id the request went to.
	Controller string
	// Task is the URI to follow; "" when the work was done.
	Task string
	// ApplyTime is the @Redfish.OperationApplyTime sent ("" for none).
	ApplyTime string
}

// Reboot reports whether the task waits for the system to reset: Ironic
// reboots for any task of a request it did not ask to apply Immediately
// (sushy itself waits for an Immediate one).
func (p Pending) Reboot() bool { return p.Task != "" && p.ApplyTime != ApplyImmediate }

// pickApplyTime is Ironic's _get_apply_time: Immediate when the
// collection supports it, else OnReset, else none sent.
func pickApplyTime(supported []string) string {
	for _, at := range []string{ApplyImmediate, ApplyOnReset} {
		if slices.Contains(supported, at) {
			return at
		}
	}
	return ""
}

// RAID is a BMC that builds and removes logical disks on its storage
// controllers (Redfish Storage Volumes).
type RAID interface {
	// Volumes lists every logical disk of every controller.
	Volumes(ctx context.Context) ([]Volume, error)
	// CreateVolume asks for one logical disk.
	CreateVolume(ctx context.Context, spec VolumeSpec) (Pending, error)
	// DeleteVolume asks to remove one logical disk that Volumes listed.
	DeleteVolume(ctx context.Context, v Volume) (Pending, error)
	// RAIDTask reads the progress of a Pending's task.
	RAIDTask(ctx context.Context, task string) (Task, error)
}

// CheckVolumeSpec refuses a level the BMC cannot build, in Ironic's
// words, before anything is sent.
func CheckVolumeSpec(s VolumeSpec) error {
	if _, ok := RAIDLevels[s.Level]; !ok {
		levels := make([]string, 0, len(RAIDLevels))
		for k := range RAIDLevels {
			levels = append(levels, k)
		}
		slices.Sort(levels)
		return fmt.Errorf("RAID level %s is not supported by the driver. Supported RAID levels: %s", s.Level, strings.Join(levels, ", "))
	}
	return nil
}

// pickDrives chooses the drives of a controller's for spec: those it
// names, else the first Disks or the fewest its level needs.
func pickDrives(spec VolumeSpec, controller string, have []string) ([]string, error) {
	if len(spec.Drives) > 0 {
		for _, d := range spec.Drives {
			if !slices.Contains(have, d) {
				return nil, fmt.Errorf("controller %s has no drive %s (it has %s)", controller, d, strings.Join(have, ", "))
			}
		}
		return spec.Drives, nil
	}
	n := spec.Disks
	if n == 0 {
		n = minDisks[spec.Level]
	}
	if n > len(have) {
		return nil, fmt.Errorf("RAID %s needs %d drives; controller %s has %d", spec.Level, n, controller, len(have))
	}
	return have[:n], nil
}

type odataLink struct {
	ID string `json:"@odata.id"`
}

// redfishStorage is a Storage resource as far as RAID needs it.
type redfishStorage struct {
	ID      string `json:"Id"`
	Path    string `json:"@odata.id"`
	Drives  []odataLink
	Volumes odataLink
}

// volumeCollection is a Storage's Volumes collection with the apply
// times it takes for creating and deleting volumes.
type volumeCollection struct {
	Members    []odataLink
	ApplyTimes struct {
		SupportedValues []string
	} `json:"@Redfish.OperationApplyTimeSupport"`
}

// storages reads the system's Storage resources; a system without any
// cannot build RAID.
func (c *redfishClient) storages(op string) ([]redfishStorage, error) {
	var sys struct{ Storage odataLink }
	if err := c.getJSON(c.sysPath, &sys); err != nil {
		return nil, err
	}
	var coll struct{ Members []odataLink }
	if sys.Storage.ID != "" {
		if err := c.getJSON(sys.Storage.ID, &coll); err != nil {
			return nil, err
		}
	}
	if len(coll.Members) == 0 {
		return nil, &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "the system has no Redfish Storage"}
	}
	out := make([]redfishStorage, 0, len(coll.Members))
	for _, m := range coll.Members {
		var s redfishStorage
		if err := c.getJSON(m.ID, &s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (c *redfishClient) Volumes(ctx context.Context) ([]Volume, error) {
	var out []Volume
	err := c.do(ctx, "reading RAID volumes", func() error {
		out = nil
		st, err := c.storages("reading RAID volumes")
		if err != nil {
			return err
		}
		for _, s := range st {
			// A controller without a Volumes collection builds no RAID,
			// as Ironic skips it.
			if s.Volumes.ID == "" {
				continue
			}
			var coll volumeCollection
			if err := c.getJSON(s.Volumes.ID, &coll); err != nil {
				return err
			}
			for _, m := range coll.Members {
				var v struct {
					ID            string `json:"Id"`
					Name          string
					RAIDType      string
					VolumeType    string
					CapacityBytes int64
				}
				if err := c.getJSON(m.ID, &v); err != nil {
					return err
				}
				vol := Volume{ID: v.ID, Name: v.Name, Controller: s.ID, SizeBytes: v.CapacityBytes, Level: volumeTypes[v.VolumeType],
					path: m.ID, applyTime: pickApplyTime(coll.ApplyTimes.SupportedValues)}
				for level, t := range RAIDLevels {
					if t == v.RAIDType {
						vol.Level = level
					}
				}
				out = append(out, vol)
			}
		}
		return nil
	})
	return out, err
}

// CreateVolume POSTs a Volume to the controller's Volumes collection, as
// Ironic's redfish RAID does: RAIDType, CapacityBytes unless the size is
// MAX (the controller then sizes it, allowing for its metadata), the
// drives by link, the name, and the apply time Ironic picks from the
// collection's @Redfish.OperationApplyTimeSupport. A 202 is a task to
// follow; a Location is taken as the new volume only when it lies under
// the collection and reads as a Volume: BMCs answer with a task or a
// job there too (iDRAC's JID_…), which is no volume Id.
func (c *redfishClient) CreateVolume(ctx context.Context, spec VolumeSpec) (Pending, error) {
	op := "creating a RAID " + spec.Level + " volume"
	var p Pending
	err := c.do(ctx, op, func() error {
		p = Pending{}
		st, err := c.storages(op)
		if err != nil {
			return err
		}
		var s *redfishStorage
		for i := range st {
			named := spec.Controller != "" && st[i].ID == spec.Controller
			usable := spec.Controller == "" && len(st[i].Drives) > 0 && st[i].Volumes.ID != ""
			if named || usable {
				s = &st[i]
				break
			}
		}
		switch {
		case s == nil && spec.Controller != "":
			return &Error{Op: op, Where: c.where, Kind: ErrBMC, Message: "the system has no storage controller " + spec.Controller}
		case s == nil:
			return &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "no storage controller has drives and a Volumes collection"}
		case s.Volumes.ID == "":
			return &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "storage controller " + s.ID + " has no Volumes collection"}
		}
		byID := map[string]string{}
		var have []string
		for _, d := range s.Drives {
			byID[path.Base(d.ID)] = d.ID
			have = append(have, path.Base(d.ID))
		}
		drives, err := pickDrives(spec, s.ID, have)
		if err != nil {
			return &Error{Op: op, Where: c.where, Kind: ErrBMC, Message: err.Error()}
		}
		var coll volumeCollection
		if err := c.getJSON(s.Volumes.ID, &coll); err != nil {
			return err
		}
		p.Controller, p.ApplyTime = s.ID, pickApplyTime(coll.ApplyTimes.SupportedValues)
		links := make([]odataLink, len(drives))
		for i, d := range drives {
			links[i] = odataLink{ID: byID[d]}
		}
		payload := map[string]any{"RAIDType": RAIDLevels[spec.Level], "Links": map[string]any{"Drives": links}}
		if spec.SizeGB > 0 {
			payload["CapacityBytes"] = spec.SizeGB * gib
		}
		if spec.Name != "" {
			payload["Name"] = spec.Name
		}
		if p.ApplyTime != "" {
			payload["@Redfish.OperationApplyTime"] = p.ApplyTime
		}
		resp, err := c.api.Post(s.Volumes.ID, payload)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		loc := locationPath(resp.Header.Get("Location"))
		if resp.StatusCode == http.StatusAccepted {
			if loc == "" {
				return &Error{Op: op, Where: c.where, Kind: ErrBMC, Message: "the BMC accepted the volume (HTTP 202) but named no task to follow"}
			}
			p.Task = loc
			return nil
		}
		// A BMC that names no Location still built the volume; it is
		// then known only by what Volumes reports.
		if id, ok := c.volumeAt(s.Volumes.ID, loc); ok {
			p.Volume = id
		}
		return nil
	})
	return p, err
}

// locationPath is a Location header as a path on the BMC: BMCs send
// absolute URLs as well as paths.
func locationPath(loc string) string {
	if u, err := url.Parse(loc); err == nil && u.Path != "" {
		return u.Path
	}
	return loc
}

// volumeAt is the Id of the Volume at loc, when loc is a member of the
// collection coll and reads as a Volume.
func (c *redfishClient) volumeAt(coll, loc string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(loc, "/"), strings.TrimSuffix(coll, "/")+"/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", false
	}
	var v struct {
		ID   string `json:"Id"`
		Type string `json:"@odata.type"`
	}
	if err := c.getJSON(loc, &v); err != nil || v.ID == "" || !strings.HasPrefix(v.Type, "#Volume.") {
		return "", false
	}
	return v.ID, true
}

// DeleteVolume sends DELETE to the volume with the apply time Ironic
// picks from its collection (sushy's Volume.delete puts it in the body).
func (c *redfishClient) DeleteVolume(ctx context.Context, v Volume) (Pending, error) {
	p := Pending{Controller: v.Controller, ApplyTime: v.applyTime}
	err := c.do(ctx, "deleting RAID volume "+v.ID, func() error {
		var resp *http.Response
		var err error
		if v.applyTime == "" {
			resp, err = c.api.Delete(v.path)
		} else {
			body, _ := json.Marshal(map[string]string{"@Redfish.OperationApplyTime": v.applyTime})
			resp, err = c.api.RunRawRequestWithHeaders(http.MethodDelete, v.path, bytes.NewReader(body), "application/json", nil)
		}
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			p.Task = locationPath(resp.Header.Get("Location"))
			if p.Task == "" {
				return &Error{Op: "deleting RAID volume " + v.ID, Where: c.where, Kind: ErrBMC, Message: "the BMC accepted the deletion (HTTP 202) but named no task to follow"}
			}
		}
		return nil
	})
	return p, err
}

// RAIDTask reads a RAID request's task monitor, Task or Dell Job
// (readTask). A task the BMC no longer has is taken as done, as Ironic's
// _raid_config_in_progress assumes when it cannot read one: the volumes
// read afterwards say what happened.
func (c *redfishClient) RAIDTask(ctx context.Context, task string) (Task, error) {
	return c.readTask(ctx, "following RAID task "+task, task)
}

// The fake machine's one controller: four 480 GB SSDs.
const (
	fakeController = "RAID.Integrated.1"
	fakeDriveBytes = 479559942144
)

var fakeDrives = []string{"Disk.0", "Disk.1", "Disk.2", "Disk.3"}

// fakeRAID is the fake machine's logical disks, guarded by the fake's lock.
type fakeRAID struct {
	volumes []Volume
	next    int
}

// usable is the capacity a level leaves of n drives of size each.
func usable(level string, n int, size int64) int64 {
	overhead := map[string]int{"0": 0, "1": n / 2, "5": 1, "6": 2, "1+0": n / 2, "5+0": 2, "6+0": 4}[level]
	return int64(n-overhead) * size
}

func (f *fake) Volumes(context.Context) ([]Volume, error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.raid.volumes), nil
}

// CreateVolume on the fake builds the volume at once; a size beyond what
// the drives give fails, as a controller refuses it.
func (f *fake) CreateVolume(_ context.Context, spec VolumeSpec) (Pending, error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	op := "creating a RAID " + spec.Level + " volume"
	if spec.Controller != "" && spec.Controller != fakeController {
		return Pending{}, &Error{Op: op, Kind: ErrBMC, Message: "the system has no storage controller " + spec.Controller}
	}
	drives, err := pickDrives(spec, fakeController, fakeDrives)
	if err != nil {
		return Pending{}, &Error{Op: op, Kind: ErrBMC, Message: err.Error()}
	}
	most := usable(spec.Level, len(drives), fakeDriveBytes)
	size := spec.SizeGB * gib
	switch {
	case size == 0:
		size = most
	case size > most:
		return Pending{}, &Error{Op: op, Kind: ErrBMC, Message: fmt.Sprintf("HTTP 400 %d GiB exceeds the %d GiB RAID %s of %d drives gives", spec.SizeGB, most/gib, spec.Level, len(drives))}
	}
	f.raid.next++
	v := Volume{ID: fmt.Sprintf("Disk.Virtual.%d", f.raid.next), Name: spec.Name, Controller: fakeController, Level: spec.Level, SizeBytes: size}
	if v.Name == "" {
		v.Name = v.ID
	}
	f.raid.volumes = append(f.raid.volumes, v)
	return Pending{Volume: v.ID, Controller: fakeController}, nil
}

func (f *fake) DeleteVolume(_ context.Context, v Volume) (Pending, error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.raid.volumes, func(x Volume) bool { return x.ID == v.ID })
	if i < 0 {
		return Pending{}, &Error{Op: "deleting RAID volume " + v.ID, Kind: ErrBMC, Message: "HTTP 404 no volume " + v.ID}
	}
	f.raid.volumes = slices.Delete(f.raid.volumes, i, i+1)
	return Pending{Controller: fakeController}, nil
}

// RAIDTask on the fake: its RAID work is done before it answers, so it
// names no task.
func (f *fake) RAIDTask(context.Context, string) (Task, error) {
	return Task{State: "Completed"}, nil
}
