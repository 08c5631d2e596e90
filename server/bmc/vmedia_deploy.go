package bmc

import (
	"context"
	"slices"

	"github.com/stmcginnis/gofish/redfish"
)

// BootFromISO inserts url as the system's virtual CD (ejecting whatever
// was there, as Ironic's redfish virtual media boot does) and sets a
// one-time boot from it; mode keeps or changes the boot mode as in
// SetBootDevice. Only Redfish BMCs have virtual media here.
func BootFromISO(ctx context.Context, cl Client, url, mode string) error {
	rc, ok := cl.(*redfishClient)
	if !ok {
		return errUnsupported("inserting virtual media", "")
	}
	err := rc.do(ctx, "inserting virtual media", func() error {
		cd, err := rc.virtualCD()
		if err != nil {
			return err
		}
		if cd.Inserted {
			if err := cd.EjectMedia(); err != nil {
				return err
			}
		}
		return cd.InsertMedia(url, true, true)
	})
	if err != nil {
		return err
	}
	return cl.SetBootDevice(ctx, "cdrom", false, mode)
}

// EjectISO ejects the system's virtual CD when one is inserted.
func EjectISO(ctx context.Context, cl Client) error {
	rc, ok := cl.(*redfishClient)
	if !ok {
		return errUnsupported("ejecting virtual media", "")
	}
	return rc.do(ctx, "ejecting virtual media", func() error {
		cd, err := rc.virtualCD()
		if err != nil || !cd.Inserted {
			return err
		}
		return cd.EjectMedia()
	})
}

// virtualCD finds the system's virtual media device that takes a CD or
// DVD image, looking under the system and then under its managers, where
// many BMCs keep it.
func (c *redfishClient) virtualCD() (*redfish.VirtualMedia, error) {
	sys, err := c.system()
	if err != nil {
		return nil, err
	}
	media, err := sys.VirtualMedia()
	if err != nil {
		return nil, err
	}
	if len(media) == 0 {
		ms, err := sys.ManagedBy()
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			vm, err := m.VirtualMedia()
			if err != nil {
				return nil, err
			}
			media = append(media, vm...)
		}
	}
	for _, vm := range media {
		if slices.Contains(vm.MediaTypes, redfish.CDMediaType) || slices.Contains(vm.MediaTypes, redfish.DVDMediaType) {
			return vm, nil
		}
	}
	return nil, &Error{Op: "finding virtual media", Where: c.where, Kind: ErrUnsupported, Reason: "the BMC offers no virtual CD or DVD"}
}
