package nodes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/store"
)

// The choices of Ironic's RAID schema: RAID levels, disk types and
// interface types of a logical disk.
var (
	RAIDLevels     = []string{"JBOD", "0", "1", "2", "5", "6", "1+0", "5+0", "6+0"}
	DiskTypes      = []string{"hdd", "ssd"}
	InterfaceTypes = []string{"sata", "scsi", "sas"}
)

// logicalDiskKeys are the keys a logical disk may hold, with a check for
// each value (ironic/drivers/raid_config_schema.json).
var logicalDiskKeys = map[string]func(v any) bool{
	"raid_level": func(v any) bool { s, ok := v.(string); return ok && slices.Contains(RAIDLevels, s) },
	"size_gb": func(v any) bool {
		if s, ok := v.(string); ok {
			return s == "MAX"
		}
		f, ok := v.(float64)
		return ok && f >= 0 && f == float64(int64(f))
	},
	"volume_name":          func(v any) bool { _, ok := v.(string); return ok },
	"is_root_volume":       func(v any) bool { _, ok := v.(bool); return ok },
	"share_physical_disks": func(v any) bool { _, ok := v.(bool); return ok },
	"disk_type":            func(v any) bool { s, ok := v.(string); return ok && slices.Contains(DiskTypes, s) },
	"interface_type":       func(v any) bool { s, ok := v.(string); return ok && slices.Contains(InterfaceTypes, s) },
	"number_of_physical_disks": func(v any) bool {
		f, ok := v.(float64)
		return ok && f >= 1 && f == float64(int64(f))
	},
	"controller":     func(v any) bool { _, ok := v.(string); return ok },
	"physical_disks": func(v any) bool { _, ok := v.([]any); return ok },
}

// ValidateRAIDConfig checks a target RAID configuration against Ironic's
// schema: a logical_disks list whose entries have a raid_level and a
// size_gb and only the keys the schema knows. An empty object clears the
// target.
func ValidateRAIDConfig(cfg map[string]any) error {
	if len(cfg) == 0 {
		return nil
	}
	for k := range cfg {
		if k != "logical_disks" {
			return errs.BadRequest("raid_config", "RAID config validation error: Additional properties are not allowed ('%s' was unexpected)", k)
		}
	}
	disks, ok := cfg["logical_disks"].([]any)
	if !ok || len(disks) == 0 {
		return errs.BadRequest("logical_disks", "RAID config validation error: logical_disks must be a non-empty list")
	}
	for i, d := range disks {
		disk, ok := d.(map[string]any)
		if !ok {
			return errs.BadRequest("logical_disks", "RAID config validation error: logical_disks[%d] is not an object", i)
		}
		for _, req := range []string{"raid_level", "size_gb"} {
			if _, ok := disk[req]; !ok {
				return errs.BadRequest("logical_disks", "RAID config validation error: logical_disks[%d]: '%s' is a required property", i, req)
			}
		}
		for k, v := range disk {
			check, known := logicalDiskKeys[k]
			if !known {
				return errs.BadRequest("logical_disks", "RAID config validation error: logical_disks[%d]: additional property '%s' is not allowed; a logical disk may hold %s", i, k, raidKeys())
			}
			if !check(v) {
				return errs.BadRequest("logical_disks", "RAID config validation error: logical_disks[%d]: %v is not a valid %s", i, v, k)
			}
		}
	}
	return nil
}

// SetTargetRAID records the RAID configuration the node should get the
// next time its RAID is built (PUT /v1/nodes/{node}/states/raid). A node
// whose raid interface is no-raid refuses it, as Ironic's does.
func (s *Service) SetTargetRAID(ctx context.Context, ident string, cfg map[string]any) error {
	n, err := s.Authorized(ctx, ident, RuleSetRAIDState)
	if err != nil {
		return err
	}
	err = s.setTargetRAID(ctx, n, cfg)
	s.guard.Done(ctx, RuleSetRAIDState, "node", n.UUID, err, map[string]any{"target_raid_config": cfg})
	return err
}

func (s *Service) setTargetRAID(ctx context.Context, n *ent.Node, cfg map[string]any) error {
	if err := ValidateRAIDConfig(cfg); err != nil {
		return err
	}
	if iface := (&View{Node: n}).Interface("raid"); iface == "no-raid" {
		return errs.BadRequest("raid_interface", "Driver %s does not support raid (disabled or not implemented).", n.Driver)
	}
	return store.WithTx(ctx, s.db, func(tx *ent.Client) error {
		cur, err := LockRow(ctx, tx, n)
		if err != nil {
			return err
		}
		if len(cfg) == 0 {
			cfg = map[string]any{}
		}
		if err := tx.Node.UpdateOneID(cur.ID).SetTargetRaidConfig(cfg).SetUpdatedAt(time.Now()).Exec(ctx); err != nil {
			return fmt.Errorf("nodes: storing target_raid_config: %w", err)
		}
		return nil
	})
}

// raidKeys lists the keys a logical disk may hold, for messages.
func raidKeys() string {
	keys := make([]string, 0, len(logicalDiskKeys))
	for k := range logicalDiskKeys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// RAIDConfigProblem is the first place in cfg that Ironic's RAID schema
// refuses, as a path a form can point at (logical_disks[1].raid_level),
// and why; "" when cfg is a valid, non-empty configuration. A step that
// carries a configuration (raid.apply_configuration) names the field
// this way; ValidateRAIDConfig keeps the API's Ironic messages.
func RAIDConfigProblem(cfg map[string]any) (field, why string) {
	for k := range cfg {
		if k != "logical_disks" {
			return k, "is not a RAID configuration key; it holds only logical_disks"
		}
	}
	disks, ok := cfg["logical_disks"].([]any)
	if !ok || len(disks) == 0 {
		return "logical_disks", "must be a non-empty list of logical disks"
	}
	for i, d := range disks {
		at := fmt.Sprintf("logical_disks[%d]", i)
		disk, ok := d.(map[string]any)
		if !ok {
			return at, "must be an object"
		}
		for _, req := range []string{"raid_level", "size_gb"} {
			if _, ok := disk[req]; !ok {
				return at + "." + req, "is required"
			}
		}
		for _, k := range slices.Sorted(maps.Keys(disk)) {
			check, known := logicalDiskKeys[k]
			switch {
			case !known:
				return at + "." + k, "is not a logical disk key; a logical disk may hold " + raidKeys()
			case !check(disk[k]):
				return at + "." + k, logicalDiskWants[k]
			}
		}
		// The schema's dependency: physical disks are a controller's.
		if _, ok := disk["physical_disks"]; ok {
			if _, ok := disk["controller"]; !ok {
				return at + ".controller", "is required when physical_disks is given"
			}
		}
	}
	return "", ""
}

// logicalDiskWants says what each logical disk key takes, for
// RAIDConfigProblem's messages.
var logicalDiskWants = map[string]string{
	"raid_level":               "must be one of " + strings.Join(RAIDLevels, ", "),
	"size_gb":                  "must be a whole number of GiB (0 or more) or MAX",
	"volume_name":              "must be a string",
	"is_root_volume":           "must be true or false",
	"share_physical_disks":     "must be true or false",
	"disk_type":                "must be hdd or ssd",
	"interface_type":           "must be sata, scsi or sas",
	"number_of_physical_disks": "must be a whole number, at least 1",
	"controller":               "must be a string",
	"physical_disks":           "must be a list of drive names",
}
