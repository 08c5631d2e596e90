package conductor

import (
	"context"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/firmwarecomponent"
	"github.com/anvilproject/anvil/server/bmc"
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
