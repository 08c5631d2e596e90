// Package demo enrols fake-driver nodes spread over a handful of owner and
// lessee projects, so a newcomer sees a populated fleet at once, with
// runbooks that do real maintenance: a BIOS firmware update from an
// image Anvil serves, and BIOS performance settings.
package demo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/deployimages"
	"github.com/anvilproject/anvil/server/fwimages"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Owners are the hardware-owning demo projects; Lessees rent from them.
var (
	Owners  = []string{"hw-east", "hw-west", "hw-lab"}
	Lessees = []string{"tenant-blue", "tenant-green", "tenant-red", "tenant-gold"}
)

// Seed stores the demo's firmware image and enrols n demo nodes with the
// demo runbooks unless the database already has nodes; it returns how
// many nodes it created. The image is stored at every start (the same
// bytes land at the same path), so the runbook's URL keeps answering
// even if the image directory was emptied.
func Seed(ctx context.Context, db *store.DB, images *fwimages.Store, n int) (int, error) {
	img, err := images.Put(ImageName, bytes.NewReader(Image()))
	if err != nil {
		return 0, fmt.Errorf("demo firmware image: %w", err)
	}
	have, err := db.Node.Query().Count(ctx)
	if err != nil || have > 0 {
		return 0, err
	}
	recs := make([]nodes.ImportRecord, n)
	classes := []string{"baremetal-small", "baremetal-large", "gpu"}
	for i := range recs {
		name := fmt.Sprintf("demo-%05d", i+1)
		rc := classes[i%len(classes)]
		in := nodes.CreateInput{
			Name: &name, Driver: "fake", Owner: Owners[i%len(Owners)], ResourceClass: &rc,
			Properties: map[string]any{"cpus": 16 << (i % 3), "memory_mb": 65536 << (i % 3), "local_gb": 960},
		}
		// Two nodes in three are leased out; the rest stay with their owner.
		if i%3 != 2 {
			in.Lessee = Lessees[i%len(Lessees)]
		}
		traits := []string{"CUSTOM_DEMO"}
		if i%2 == 0 {
			traits = append(traits, FirmwareRunbook)
		} else {
			traits = append(traits, BIOSRunbook)
		}
		if err := nodes.ValidateCreate(&in); err != nil {
			return 0, err
		}
		// Every eighth node (from the fifth) is available for allocation;
		// the rest are manageable, ready for runbooks.
		in.ProvisionState = nodes.StateManageable
		if i%8 == 4 {
			in.ProvisionState = nodes.StateAvailable
		}
		recs[i] = nodes.ImportRecord{Line: i + 1, Node: in, Traits: traits}
	}
	if err := nodes.Import(ctx, db, recs); err != nil {
		return 0, err
	}
	if err := inventories(ctx, db, recs); err != nil {
		return 0, err
	}
	return n, runbooks(ctx, db, img.URL)
}

// inventories gives each available demo node the inventory its agent
// would have reported, with an address from the documentation ranges
// (RFC 5737, RFC 3849), so a demo deployment shows where to reach it.
func inventories(ctx context.Context, db *store.DB, recs []nodes.ImportRecord) error {
	for i, r := range recs {
		if r.Node.ProvisionState != nodes.StateAvailable {
			continue
		}
		n, err := db.Node.Query().Where(node.Name(*r.Node.Name)).Only(ctx)
		if err != nil {
			return err
		}
		host := i%250 + 1
		inv := map[string]any{
			"cpu":    map[string]any{"count": r.Node.Properties["cpus"], "architecture": "x86_64"},
			"memory": map[string]any{"physical_mb": r.Node.Properties["memory_mb"]},
			"interfaces": []any{map[string]any{"name": "eno1", "mac_address": fmt.Sprintf("52:54:00:00:%02x:%02x", i>>8&0xff, i&0xff),
				"ipv4_address": fmt.Sprintf("192.0.2.%d", host), "ipv6_address": fmt.Sprintf("2001:db8::%x", host)}},
		}
		if err := db.NodeInventory.Create().SetNodeID(n.ID).SetInventory(inv).SetPluginData(map[string]any{}).Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// The demo's runbooks, by name (each also the trait a node needs).
const (
	FirmwareRunbook = "CUSTOM_FIRMWARE_UPDATE"
	BIOSRunbook     = "CUSTOM_BIOS_PERF"
)

// ImageName is the demo firmware image's name.
const ImageName = "demo-bios-1.1.0.bin"

// Image is the demo's BIOS firmware image: 64 KiB, the same bytes every
// time, so its address (by hash) is too. No BMC checks its contents.
func Image() []byte {
	const size = 64 << 10
	out := []byte("ANVIL DEMO BIOS IMAGE 1.1.0\n")
	block := sha256.Sum256(out)
	for len(out) < size {
		out = append(out, block[:]...)
		block = sha256.Sum256(block[:])
	}
	return out[:size]
}

// Step is one step of a demo runbook.
type Step struct {
	Interface, Step string
	Args            map[string]any
}

// Runbook is a demo runbook; Owner empty is the system's.
type Runbook struct {
	Name   string
	Owner  string
	Public bool
	Steps  []Step
}

// Runbooks are the demo's runbooks, the firmware one naming the image at
// imageURL: public ones every tenant can run on nodes carrying their
// name, and a private one of tenant-blue's.
func Runbooks(imageURL string) []Runbook {
	return []Runbook{
		// A BIOS image takes effect at the next boot; the pause lets a
		// BMC finish staging it first (and a demo watch the steps go by).
		{FirmwareRunbook, "", true, []Step{
			{"firmware", "update", map[string]any{"settings": []any{map[string]any{"component": "bios", "url": imageURL}}}},
			{"deploy", "wait", map[string]any{"seconds": float64(3)}},
			{"power", "reboot", map[string]any{}},
		}},
		// apply_configuration reboots when a value changes and checks each
		// became current.
		{BIOSRunbook, "", true, []Step{
			{"bios", "apply_configuration", map[string]any{"settings": []any{
				map[string]any{"name": "SysProfile", "value": "PerfOptimized"},
				map[string]any{"name": "ProcTurboMode", "value": "Enabled"},
				map[string]any{"name": "ProcCStates", "value": "Disabled"},
			}}},
		}},
		{"CUSTOM_DEMO", Lessees[0], false, []Step{{"power", "reboot", map[string]any{}}}},
	}
}

func runbooks(ctx context.Context, db *store.DB, imageURL string) error {
	return store.WithTx(ctx, db, func(tx *ent.Client) error {
		for _, rb := range Runbooks(imageURL) {
			var owner *string
			if rb.Owner != "" {
				owner = &rb.Owner
			}
			r, err := tx.Runbook.Create().SetUUID(uuid.NewString()).SetName(rb.Name).SetNillableOwner(owner).SetPublic(rb.Public).
				SetExtra(map[string]any{}).Save(ctx)
			if err != nil {
				return err
			}
			for i, st := range rb.Steps {
				if err := tx.RunbookStep.Create().SetRunbookID(r.ID).SetInterface(st.Interface).SetStep(st.Step).SetArgs(st.Args).SetOrder(i + 1).Exec(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// DiskImageName is the demo's whole-disk image, which the Deploy panel
// offers when the operator publishes none (serve --demo without
// --deploy-images).
const DiskImageName = "demo-disk-1.0.raw"

// DeployImages stores the demo disk image and returns it as the one
// published image. Demo nodes are fake-hardware, which deploys without
// downloading it; the bytes are there for a real node an operator adds.
func DeployImages(images *fwimages.Store) ([]deployimages.Image, error) {
	img, err := images.Put(DiskImageName, bytes.NewReader(diskImage()))
	if err != nil {
		return nil, fmt.Errorf("demo disk image: %w", err)
	}
	return []deployimages.Image{{Name: "Demo disk 1.0", URL: img.URL, Checksum: "sha256:" + img.SHA256, SSHUser: "root"}}, nil
}

// diskImage is 1 MiB: a marker, then zeros, the same bytes every time.
func diskImage() []byte {
	out := make([]byte, 1<<20)
	copy(out[4096:], "ANVIL DEMO DISK 1.0\n")
	return out
}
