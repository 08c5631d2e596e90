package conductor

import (
	"context"
	"encoding/json"
	"time"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/urlsafe"
)

// Keys of driver_internal_info under which the conductor keeps what a BMC
// last reported or accepted, so that the portal can show it without
// asking the BMC. Ironic stores neither: these are Anvil's own.
const (
	// InternalVMedia holds a VMediaState.
	InternalVMedia = "vmedia"
	// InternalIndicators maps an indicator's Ironic name,
	// "<id>@<component>", to its IndicatorState.
	InternalIndicators = "indicators"
	// InternalBMCRetry holds a BMCRetry while a step's BMC call is being
	// retried, and null once that step has ended.
	InternalBMCRetry = "bmc_retry"
)

// BMCRetry is the try a step's BMC call is on after the BMC did not
// answer: Try of Of, each allowed Timeout seconds, begun At.
type BMCRetry struct {
	Step    string    `json:"step"`
	Try     int       `json:"try"`
	Of      int       `json:"of"`
	Timeout float64   `json:"timeout_s"`
	At      time.Time `json:"at"`
}

// StoredBMCRetry decodes the retry a step is on; ok is false when no
// step is retrying its BMC.
func StoredBMCRetry(info map[string]any) (BMCRetry, bool) {
	var r BMCRetry
	return r, decodeInternal(info, InternalBMCRetry, &r) && r.Try > 0
}

// VMediaState is the virtual media a BMC last had inserted, as Anvil knows
// it: At is when it last learned it (an attach, a detach, or a read).
type VMediaState struct {
	Devices []VMediaDevice `json:"devices"`
	At      time.Time      `json:"at"`
}

// VMediaDevice is one device with an image in it, Since when Anvil first
// saw it there.
type VMediaDevice struct {
	Device string    `json:"device_type"`
	Image  string    `json:"image_url"`
	Since  time.Time `json:"since"`
}

// IndicatorState is an indicator's state when Anvil last read or set it.
type IndicatorState struct {
	State string    `json:"state"`
	At    time.Time `json:"at"`
}

// StoredVMedia decodes the node's driver_internal_info entry; ok is false
// when Anvil has never learned the node's virtual media.
func StoredVMedia(info map[string]any) (VMediaState, bool) {
	var s VMediaState
	return s, decodeInternal(info, InternalVMedia, &s)
}

// StoredIndicators decodes the node's indicator states by name.
func StoredIndicators(info map[string]any) map[string]IndicatorState {
	s := map[string]IndicatorState{}
	decodeInternal(info, InternalIndicators, &s)
	return s
}

// decodeInternal reads info[key] into out through JSON, as the map holds
// what the database's JSON decoded to; a malformed entry counts as absent.
func decodeInternal(info map[string]any, key string, out any) bool {
	v, ok := info[key]
	if !ok {
		return false
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return false
	}
	return json.Unmarshal(raw, out) == nil
}

// setInternal sets one key of the node's driver_internal_info in place,
// leaving the others as they are: a run's abort request, written while
// the run holds the lock, must survive it. holder is the conductor whose
// lock the node must carry, "" for a node nobody holds: a read outside
// the lock does not record what a lock holder may be changing.
func (c *Conductor) setInternal(ctx context.Context, db *ent.Client, id int, holder, key string, value any) error {
	_, err := c.setInternalIf(ctx, db, id, holder, key, value, "")
	return err
}

// setInternalIf is setInternal that also requires cond, a condition on
// the nodes row written in SQL both dialects read alike, and says how
// many rows it changed (0: the node was not as required).
func (c *Conductor) setInternalIf(ctx context.Context, db *ent.Client, id int, holder, key string, value any, cond string) (int64, error) {
	raw, err := json.Marshal(value)
	if err != nil {
		return 0, err
	}
	var hold any
	if holder != "" {
		hold = holder
	}
	if cond != "" {
		cond = " AND " + cond
	}
	// Only an object can take a key: a node whose info is NULL or not an
	// object starts from an empty one.
	query := `UPDATE nodes SET driver_internal_info = json_set(CASE WHEN json_type(driver_internal_info) = 'object'
	THEN driver_internal_info ELSE '{}' END, '$.` + key + `', json(?)) WHERE id = ? AND reservation IS ?` + cond
	args := []any{string(raw), id, hold}
	if c.db.Dialect == dialect.Postgres {
		query = `UPDATE nodes SET driver_internal_info = jsonb_set(CASE WHEN jsonb_typeof(driver_internal_info) = 'object'
	THEN driver_internal_info ELSE '{}'::jsonb END, '{` + key + `}', $1::jsonb) WHERE id = $2 AND reservation IS NOT DISTINCT FROM $3::text` + cond
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// vmediaChanged records an attach or a detach the BMC accepted, under the
// node's lock: devices is what the change touched (nil for every one), an
// attach's image goes in, a detach's ("" image) comes out. n takes the
// entry too, as a run of steps writes its copy of driver_internal_info
// whole at the next step.
func (c *Conductor) vmediaChanged(ctx context.Context, db *ent.Client, n *ent.Node, devices []string, image string) error {
	cur, err := db.Node.Get(ctx, n.ID)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	old, _ := StoredVMedia(cur.DriverInternalInfo)
	s := VMediaState{At: now, Devices: []VMediaDevice{}}
	for _, d := range old.Devices {
		touched := devices == nil
		for _, t := range devices {
			touched = touched || t == d.Device
		}
		if !touched {
			s.Devices = append(s.Devices, d)
		}
	}
	if image != "" {
		for _, d := range devices {
			s.Devices = append(s.Devices, VMediaDevice{Device: d, Image: urlsafe.Strip(image), Since: now})
		}
	}
	if err := c.setInternal(ctx, db, n.ID, c.cfg.Name, InternalVMedia, s); err != nil {
		return err
	}
	n.DriverInternalInfo = cloneInfo(n.DriverInternalInfo)
	n.DriverInternalInfo[InternalVMedia] = s
	return nil
}

// vmediaRead records the devices a BMC reported, keeping when Anvil
// first saw an image that is still where it was.
func (c *Conductor) vmediaRead(ctx context.Context, id int, old map[string]any, list []bmc.VMedia) error {
	now := time.Now().UTC()
	prev, _ := StoredVMedia(old)
	s := VMediaState{At: now, Devices: []VMediaDevice{}}
	for _, v := range list {
		if !v.Inserted {
			continue
		}
		d := VMediaDevice{Device: v.Device, Image: urlsafe.Strip(v.Image), Since: now}
		for _, p := range prev.Devices {
			if p.Device == d.Device && p.Image == d.Image {
				d.Since = p.Since
			}
		}
		s.Devices = append(s.Devices, d)
	}
	return c.setInternal(ctx, c.db.Client, id, "", InternalVMedia, s)
}

// indicatorsRead records every indicator's state as the BMC reported it;
// one whose state the BMC cannot say is left as last known.
func (c *Conductor) indicatorsRead(ctx context.Context, id int, old map[string]any, list []bmc.Indicator) error {
	now := time.Now().UTC()
	s := StoredIndicators(old)
	for _, l := range list {
		if l.State != "" && l.State != bmc.IndicatorUnknown {
			s[l.ID+"@"+l.Component] = IndicatorState{State: l.State, At: now}
		}
	}
	return c.setInternal(ctx, c.db.Client, id, "", InternalIndicators, s)
}

// indicatorSet records a state the BMC accepted, under the node's lock.
func (c *Conductor) indicatorSet(ctx context.Context, db *ent.Client, id int, name, state string) error {
	n, err := db.Node.Get(ctx, id)
	if err != nil {
		return err
	}
	s := StoredIndicators(n.DriverInternalInfo)
	s[name] = IndicatorState{State: state, At: time.Now().UTC()}
	return c.setInternal(ctx, db, id, c.cfg.Name, InternalIndicators, s)
}
