// Package bootiso builds the ISO a virtual-media node boots the ramdisk
// agent from when the operator gives its kernel and ramdisk rather than a
// ready ISO, as Ironic's redfish-virtual-media boot does
// (images.create_esp_image_for_uefi): the kernel as /vmlinuz, the ramdisk
// as /initrd, the operator's EFI system partition image (a FAT image
// holding shim or GRUB, driver_info.bootloader) as the El Torito EFI
// boot image, and a grub.cfg that boots the kernel with the agent's
// parameters. The image is UEFI-only: a BIOS boot would need isolinux,
// which Anvil does not ship.
package bootiso

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// The ISO's layout, Ironic's: GRUB images built for an ISO look for
// grub.cfg in /boot/grub (GRUB's own prefix) or beside the EFI binary
// in /EFI/BOOT (shim's default, Ironic's [DEFAULT]grub_config_path);
// both hold the same file.
const (
	VolumeID   = "VMEDIA_BOOT_ISO"
	KernelPath = "/vmlinuz"
	InitrdPath = "/initrd"
	ESPPath    = "/boot/grub/efiboot.img"
)

// GrubPaths are where the ISO holds its grub.cfg.
var GrubPaths = []string{"/boot/grub/grub.cfg", "/EFI/BOOT/grub.cfg"}

// ErrNoESP refuses an image without an EFI system partition to boot.
var ErrNoESP = errors.New("a bootable ISO needs an EFI system partition image (driver_info.bootloader): Anvil builds UEFI-bootable ISOs only, BIOS would need isolinux")

// GrubConfig is the grub.cfg that boots the kernel with params, as
// Ironic's grub_conf.template writes it.
func GrubConfig(params string) string {
	return fmt.Sprintf(`set default=0
set timeout=5
set hidden_timeout_quiet=false

menuentry "boot_partition" {
linux %s %s --
initrd %s
}
`, KernelPath, params, InitrdPath)
}

// Build writes a UEFI-bootable ISO 9660 image to out (which must be
// empty): kernel, ramdisk and the ESP image are streamed into a scratch
// directory beside out, which is removed afterwards, so the bytes are
// never all in memory. params may not contain a line break: it is one
// line of grub.cfg.
func Build(out *os.File, kernel, ramdisk, esp io.Reader, params string) (err error) {
	if esp == nil {
		return ErrNoESP
	}
	if strings.ContainsAny(params, "\r\n") {
		return errors.New("kernel parameters must be one line")
	}
	work, err := os.MkdirTemp(filepath.Dir(out.Name()), ".bootiso-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	put := func(p string, r io.Reader) error {
		dst := filepath.Join(work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
			return err
		}
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		return errors.Join(err, f.Close())
	}
	cfg := GrubConfig(params)
	files := []struct {
		path, what string
		r          io.Reader
	}{
		{KernelPath, "kernel", kernel}, {InitrdPath, "ramdisk", ramdisk}, {ESPPath, "EFI system partition image", esp},
		{GrubPaths[0], "grub.cfg", strings.NewReader(cfg)}, {GrubPaths[1], "grub.cfg", strings.NewReader(cfg)},
	}
	for _, f := range files {
		if err := put(f.path, f.r); err != nil {
			return fmt.Errorf("the ISO's %s: %w", f.what, err)
		}
	}
	fs, err := iso9660.Create(file.New(out, false), 0, 0, 2048, work)
	if err != nil {
		return err
	}
	// Rock Ridge keeps the names' case, as mkisofs -r does for Ironic;
	// the ESP is a no-emulation EFI entry, mkisofs -e's.
	err = fs.Finalize(iso9660.FinalizeOptions{
		RockRidge:        true,
		VolumeIdentifier: VolumeID,
		ElTorito: &iso9660.ElTorito{
			BootCatalog: "/boot/boot.catalog",
			Entries: []*iso9660.ElToritoEntry{
				{Platform: iso9660.EFI, Emulation: iso9660.NoEmulation, BootFile: ESPPath},
			},
		},
	})
	if err != nil {
		return fmt.Errorf("writing the ISO: %w", err)
	}
	return nil
}
