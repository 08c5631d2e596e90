package conductor

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/server/bootiso"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/ramdisk"
)

// Bounds on building an agent ISO: each of the kernel, ramdisk and ESP
// image may be this large (an agent ramdisk is a few hundred MiB), and
// the downloads and the build together take at most this long.
const (
	bootISOMaxBytes = 1 << 30
	bootISOTimeout  = 15 * time.Minute
)

// bootISOSetup checks a redfish-virtual-media node without deploy_iso
// can have its ISO built, as Ironic's redfish boot interface builds one:
// http(s) URLs for deploy_kernel, deploy_ramdisk and, for UEFI (the
// default boot mode), bootloader, the EFI system partition image whose
// GRUB boots the kernel, each the node's or the server's default (m).
// BIOS would need isolinux, which Anvil does not ship, so a node in boot
// mode bios needs a deploy_iso.
func bootISOSetup(n *ent.Node, iface string, m ramdisk.Media) error {
	k, _ := m.Get(n, "deploy_kernel")
	r, _ := m.Get(n, "deploy_ramdisk")
	if k == "" && r == "" {
		return &bootSetupError{"driver_info/deploy_iso", fmt.Sprintf("boot interface %s boots the agent from driver_info.deploy_iso, or from an ISO Anvil builds of deploy_kernel, deploy_ramdisk and bootloader, each from driver_info or the server's defaults (anvil serve --deploy-kernel, --deploy-ramdisk, --bootloader); none is set", iface)}
	}
	for _, f := range []string{"deploy_kernel", "deploy_ramdisk"} {
		if err := httpURL(n, m, f); err != nil {
			return err
		}
	}
	if BootMode(n) == "bios" {
		return &bootSetupError{"driver_info/deploy_iso", fmt.Sprintf("boot interface %s in boot mode bios boots the agent from driver_info.deploy_iso only: Anvil builds UEFI-bootable ISOs of deploy_kernel and deploy_ramdisk, and BIOS would need isolinux", iface)}
	}
	if v, _ := m.Get(n, "bootloader"); v == "" {
		return &bootSetupError{"driver_info/bootloader", fmt.Sprintf("boot interface %s builds the agent's ISO for UEFI from deploy_kernel and deploy_ramdisk with bootloader, an EFI system partition image, which neither driver_info.bootloader nor %s sets", iface, ramdisk.MediaFlag("bootloader"))}
	}
	if err := httpURL(n, m, "bootloader"); err != nil {
		return err
	}
	if p, _ := n.DriverInfo["kernel_append_params"].(string); strings.ContainsAny(p, "\r\n") {
		return &bootSetupError{"driver_info/kernel_append_params", "driver_info.kernel_append_params must be one line"}
	}
	return nil
}

// httpURL checks a boot media field (the node's or the server's default)
// holds an http(s) URL, all Anvil downloads.
func httpURL(n *ent.Node, m ramdisk.Media, field string) error {
	v, from := m.Get(n, field)
	u, err := url.Parse(v)
	if v == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &bootSetupError{"driver_info/" + field, fmt.Sprintf("%s %q must be an http:// or https:// URL for Anvil to build the agent's ISO from", from, v)}
	}
	return nil
}

// bootISOs are the built ISOs in use, by node id: one per agent boot.
type bootISOs struct {
	mu   sync.Mutex
	name map[int]string
}

// agentKernelParams are the agent's kernel parameters in a built ISO:
// where Anvil's API is, the request id its logs carry, where to post the
// inventory when the boot is an inspection (Ironic puts
// ipa-inspection-callback-url there only then: an agent that has it
// posts an inventory at every start), the NIC to boot from (the first
// PXE-enabled port, as pxelinux writes BOOTIF), then the node's
// kernel_append_params; and the agent's token when it was pregenerated
// for this boot (pregenerateToken), as Ironic's ipa-agent-token, also in
// the inspection's callback URL. Without one, the agent's lookup issues
// it.
func (c *Conductor) agentKernelParams(ctx context.Context, n *ent.Node) (string, error) {
	params := []string{"ipa-api-url=" + c.cfg.Agent.APIURL, "ipa-global-request-id=req-" + uuid.NewString()}
	if n.ProvisionState == StateInspectWait {
		params = append(params, "ipa-inspection-callback-url="+ramdisk.InspectionCallbackFor(c.cfg.Agent.APIURL, n))
	}
	if tok := ramdisk.MediumToken(n); tok != "" {
		params = append(params, "ipa-agent-token="+tok)
	}
	p, err := c.db.Port.Query().Where(port.NodeID(n.ID), port.PxeEnabled(true)).Order(ent.Asc(port.FieldID)).First(ctx)
	if err != nil && !ent.IsNotFound(err) {
		return "", err
	}
	if p != nil {
		params = append(params, "BOOTIF=01-"+strings.ReplaceAll(strings.ToLower(p.Address), ":", "-"))
	}
	if extra, _ := n.DriverInfo["kernel_append_params"].(string); strings.TrimSpace(extra) != "" {
		params = append(params, strings.TrimSpace(extra))
	}
	return strings.Join(params, " "), nil
}

// buildBootISO builds the node's agent ISO for this boot, keeps it for
// dropBootISO, and returns the URL its BMC downloads it from.
func (c *Conductor) buildBootISO(ctx context.Context, n *ent.Node) (string, error) {
	m := c.cfg.Agent.Media
	if err := bootISOSetup(n, "redfish-virtual-media", m); err != nil {
		return "", err
	}
	if c.cfg.Agent.ISOs == nil {
		return "", fmt.Errorf("node %s has no driver_info.deploy_iso and this conductor builds no ISOs", n.UUID)
	}
	params, err := c.agentKernelParams(ctx, n)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, bootISOTimeout)
	defer cancel()
	src := func(field string) *download {
		u, from := m.Get(n, field)
		// The server's defaults are the operator's own URLs, which may
		// well be on its own host; driver_info's are a tenant's.
		cl := http.DefaultClient
		if strings.HasPrefix(from, "driver_info.") {
			cl = c.fetch
		}
		return &download{ctx: ctx, url: u, from: from, client: cl}
	}
	kernel, initrd, esp := src("deploy_kernel"), src("deploy_ramdisk"), src("bootloader")
	defer kernel.Close()
	defer initrd.Close()
	defer esp.Close()
	started := time.Now()
	name, isoURL, err := c.cfg.Agent.ISOs.Create(func(f *os.File) error {
		return bootiso.Build(f, kernel, initrd, esp, params)
	})
	if err != nil {
		return "", fmt.Errorf("building the agent's ISO: %w", err)
	}
	c.bootISOs.mu.Lock()
	old := c.bootISOs.name[n.ID]
	if c.bootISOs.name == nil {
		c.bootISOs.name = map[int]string{}
	}
	c.bootISOs.name[n.ID] = name
	c.bootISOs.mu.Unlock()
	if old != "" {
		_ = c.cfg.Agent.ISOs.Remove(old)
	}
	_ = history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Type: "agent", Conductor: c.cfg.Name,
		Message: fmt.Sprintf("Built the ramdisk agent's ISO from %s, %s and %s in %s", kernel.from, initrd.from, esp.from, time.Since(started).Round(time.Millisecond))})
	return isoURL, nil
}

// dropBootISO removes the node's built ISO, if it has one, when its
// agent's boot is over.
func (c *Conductor) dropBootISO(n *ent.Node) {
	c.bootISOs.mu.Lock()
	name := c.bootISOs.name[n.ID]
	delete(c.bootISOs.name, n.ID)
	c.bootISOs.mu.Unlock()
	if name == "" || c.cfg.Agent.ISOs == nil {
		return
	}
	if err := c.cfg.Agent.ISOs.Remove(name); err != nil {
		c.log.Warn("removing the agent's ISO", "node", n.UUID, "err", err)
	}
}

// download reads a URL's body when first read, so each download starts
// only when the ISO's build reaches it, and fails past bootISOMaxBytes.
type download struct {
	ctx  context.Context
	url  string
	from string // where url came from: "driver_info.<field>" or a serve flag
	// client fetches url: for driver_info's, the conductor's client for
	// tenants' URLs.
	client *http.Client
	body   io.ReadCloser
	n      int64
}

func (d *download) Read(p []byte) (int, error) {
	if d.body == nil {
		req, err := http.NewRequestWithContext(d.ctx, http.MethodGet, d.url, nil)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", d.from, err)
		}
		resp, err := d.client.Do(req)
		if err != nil {
			return 0, &mediaError{d.from, fmt.Errorf("downloading %s: %w", d.from, err)}
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return 0, &mediaError{d.from, fmt.Errorf("downloading %s %s: %s", d.from, d.url, resp.Status)}
		}
		d.body = resp.Body
	}
	n, err := d.body.Read(p)
	d.n += int64(n)
	if d.n > bootISOMaxBytes {
		return n, fmt.Errorf("%s %s is larger than %d bytes", d.from, d.url, int64(bootISOMaxBytes))
	}
	if err != nil && err != io.EOF {
		err = &mediaError{d.from, fmt.Errorf("downloading %s: %w", d.from, err)}
	}
	return n, err
}

// mediaError is a download of the agent's media that failed: as for the
// image cache (fetchSummary), the summary says only that it failed.
type mediaError struct {
	from string
	err  error
}

func (e *mediaError) Error() string { return e.err.Error() }
func (e *mediaError) Unwrap() error { return e.err }
func (e *mediaError) Summary() string {
	return fetchSummary("Anvil could not download "+e.from+" to build the agent's ISO", e.err)
}

func (d *download) Close() error {
	if d.body == nil {
		return nil
	}
	return d.body.Close()
}
