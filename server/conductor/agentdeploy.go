package conductor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/agent"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/egress"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/imagecache"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ramdisk"
)

// Deploy modes: how deploy.deploy puts an instance on a node.
const (
	modeFake        = "fake"         // fake-hardware: power on
	modeISO         = "iso"          // boot instance_info.boot_iso from virtual media
	modeDirect      = "direct"       // the agent writes image_source to disk
	modeCustomAgent = "custom-agent" // the agent runs the request's own deploy steps
)

// deployMode reads how a node deploys from its deploy interface, and
// nothing else, so the interface a node shows is what it does: direct
// has the agent write image_source (a node without one is refused, as
// Ironic's direct deploy validation does), ramdisk boots
// instance_info.boot_iso, custom-agent runs the request's agent steps.
func deployMode(n *ent.Node) string {
	if bmc.Canonical(n.Driver) == "fake-hardware" {
		return modeFake
	}
	switch (&nodes.View{Node: n}).Interface("deploy") {
	case "custom-agent":
		return modeCustomAgent
	case "ramdisk":
		return modeISO
	}
	return modeDirect
}

// The conductor's steps of an agent deploy, at the priorities Ironic's
// direct deploy gives them (agent_base.AgentDeployMixin): deploy.deploy
// (100) boots the agent, then these run around the request's own steps.
var agentDeployPlan = map[string][]DeployStep{
	modeDirect: {
		{Step{Interface: "deploy", Step: "write_image"}, ptr(80)},
		{Step{Interface: "deploy", Step: "prepare_instance_boot"}, ptr(60)},
		{Step{Interface: "deploy", Step: "tear_down_agent"}, ptr(40)},
		{Step{Interface: "deploy", Step: "boot_instance"}, ptr(20)},
	},
	modeCustomAgent: {
		{Step{Interface: "deploy", Step: "prepare_instance_boot"}, ptr(60)},
		{Step{Interface: "deploy", Step: "tear_down_agent"}, ptr(40)},
		{Step{Interface: "deploy", Step: "boot_instance"}, ptr(20)},
	},
}

func ptr[T any](v T) *T { return &v }

// agentDeploySteps run the conductor's side of an agent deploy.
var agentDeploySteps = map[string]func(c *Conductor, ctx context.Context, n *ent.Node, ph phase) (string, error){
	"deploy.write_image":           (*Conductor).writeImage,
	"deploy.prepare_instance_boot": (*Conductor).prepareInstanceBoot,
	"deploy.tear_down_agent":       (*Conductor).tearDownAgent,
	"deploy.boot_instance":         (*Conductor).bootInstance,
}

// hexRE is a checksum's hex digits.
var hexRE = regexp.MustCompile(`^[0-9a-fA-F]{32,128}$`)

// hashAlgos are the os_hash_algo values the agent verifies.
var hashAlgos = []string{"md5", "sha1", "sha256", "sha384", "sha512"}

// imageFits checks what the agent needs to write image_source, naming the
// field: an http(s) URL, a disk format it writes, and a checksum it can
// verify (Ironic refuses an image it cannot check).
func imageFits(n *ent.Node) error {
	ii := n.InstanceInfo
	src, _ := ii["image_source"].(string)
	u, err := url.Parse(src)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(src) > 2048 {
		return errs.BadRequest("instance_info.image_source", "Cannot deploy node %s: instance_info.image_source must be an http:// or https:// URL the agent downloads (at most 2048 characters)", n.UUID)
	}
	if f, ok := ii["image_disk_format"]; ok {
		if s, _ := f.(string); s != "raw" && s != "qcow2" {
			return errs.BadRequest("instance_info.image_disk_format", "Cannot deploy node %s: instance_info.image_disk_format must be raw or qcow2 (a whole-disk image)", n.UUID)
		}
	}
	algo, _ := ii["image_os_hash_algo"].(string)
	val, _ := ii["image_os_hash_value"].(string)
	sum, _ := ii["image_checksum"].(string)
	switch {
	case algo != "" || val != "":
		if !slices.Contains(hashAlgos, algo) {
			return errs.BadRequest("instance_info.image_os_hash_algo", "Cannot deploy node %s: instance_info.image_os_hash_algo must be one of %s", n.UUID, strings.Join(hashAlgos, ", "))
		}
		if !hexRE.MatchString(val) {
			return errs.BadRequest("instance_info.image_os_hash_value", "Cannot deploy node %s: instance_info.image_os_hash_value must be the image's %s in hex", n.UUID, algo)
		}
	case sum != "":
		if !hexRE.MatchString(sum) {
			return errs.BadRequest("instance_info.image_checksum", "Cannot deploy node %s: instance_info.image_checksum must be the image's checksum in hex", n.UUID)
		}
	default:
		return errs.BadRequest("instance_info.image_os_hash_value", "Cannot deploy node %s: give instance_info.image_os_hash_algo and image_os_hash_value (or image_checksum): the agent refuses an image it cannot verify", n.UUID)
	}
	if src, field := downloadSource(n); src != "http" && src != "local" {
		return errs.BadRequest(field, "Cannot deploy node %s: %s %q must be http (the agent downloads image_source) or local (Anvil downloads and caches it, and the agent fetches it from Anvil)", n.UUID, field, src)
	}
	if cd, ok := ii["configdrive"]; ok {
		if _, err := configDriveFor(n.UUID, cd); err != nil {
			return errs.BadRequest("configdrive", "Cannot deploy node %s: %v", n.UUID, err)
		}
	}
	return nil
}

// imageInfo is what the agent is told to write, as Ironic's
// deploy_utils.build_instance_info_for_deploy gives it.
func imageInfo(n *ent.Node) agent.ImageInfo {
	ii := n.InstanceInfo
	src, _ := ii["image_source"].(string)
	format, _ := ii["image_disk_format"].(string)
	algo, _ := ii["image_os_hash_algo"].(string)
	val, _ := ii["image_os_hash_value"].(string)
	sum, _ := ii["image_checksum"].(string)
	mode := BootMode(n)
	if mode == "" {
		mode = "uefi"
	}
	id := n.UUID
	if u, err := url.Parse(src); err == nil && path.Base(u.Path) != "" {
		id = path.Base(u.Path)
	}
	return agent.ImageInfo{ID: id, URLs: []string{src}, DiskFormat: format, ContainerFormat: "bare", ImageType: "whole-disk",
		OSHashAlgo: algo, OSHashValue: strings.ToLower(val), Checksum: strings.ToLower(sum), StreamRawImages: true,
		NodeUUID: n.UUID, DeployBootMode: mode, BootOption: "local"}
}

// downloadSource is where the agent gets the image (Ironic's
// image_download_source: instance_info's, else driver_info's, else http)
// and the field that said so.
func downloadSource(n *ent.Node) (src, field string) {
	if v, ok := n.InstanceInfo["image_download_source"]; ok {
		s, _ := v.(string)
		return s, "instance_info.image_download_source"
	}
	if v, ok := n.DriverInfo["image_download_source"]; ok {
		s, _ := v.(string)
		return s, "driver_info.image_download_source"
	}
	return "http", ""
}

// cacheImage downloads a local-source image into Anvil's cache, checked
// against the node's checksum, and returns the URL the agent fetches it
// from and the token to unlink once the image is written.
func (c *Conductor) cacheImage(ctx context.Context, n *ent.Node) (link, token string, err error) {
	ii := n.InstanceInfo
	src, _ := ii["image_source"].(string)
	sum := imagecache.Checksum{Field: "instance_info.image_os_hash_value"}
	sum.Algo, _ = ii["image_os_hash_algo"].(string)
	sum.Value, _ = ii["image_os_hash_value"].(string)
	if sum.Value == "" {
		sum.Field = "instance_info.image_checksum"
		sum.Value, _ = ii["image_checksum"].(string)
		sum.Algo = imagecache.AlgoOf(sum.Value)
	}
	// A shutdown ends the download as it ends waiting on the agent, so
	// Stop does not wait out a large image.
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	// The cache is shared by project: the lessee's, whose instance
	// this is, else the owner's.
	project := n.Owner
	if n.Lessee != "" {
		project = n.Lessee
	}
	if token, err = c.images.Fetch(dctx, project, src, sum); err != nil {
		if c.ctx.Err() != nil {
			return "", "", errShutdown
		}
		var mismatch *imagecache.MismatchError
		if errors.As(err, &mismatch) {
			return "", "", err
		}
		return "", "", &downloadError{err}
	}
	return strings.TrimRight(c.cfg.Agent.ImageURL, "/") + "/" + token, token, nil
}

// downloadError is a download into the cache that failed.
type downloadError struct{ err error }

func (e *downloadError) Error() string { return e.err.Error() }
func (e *downloadError) Unwrap() error { return e.err }
func (e *downloadError) Summary() string {
	return fetchSummary("Anvil could not download instance_info.image_source into its image cache", e.err)
}

// fetchSummary is what last_error and history's message say of a failed
// fetch for a tenant: failed, and, when --image-source-networks refused
// the address before connecting, what kind of address it was. The
// conductor fetches from its own network, so how an address answered
// (refused, a status, a timeout) would let whoever named the URL map
// that network: that is history's detail, for system scope.
func fetchSummary(failed string, err error) string {
	var r *egress.RefusedError
	if errors.As(err, &r) {
		return failed + ": " + r.Summary()
	}
	return failed
}

// deployAgent is deploy.deploy of an agent deploy: boot the agent.
func (c *Conductor) deployAgent(ctx context.Context, n *ent.Node, ph phase) (string, error) {
	if _, err := c.agentFor(ctx, n, ph); err != nil {
		return "", err
	}
	return bmc.PowerOn, nil
}

// writeImage has the agent download, verify and write the image, then the
// config drive (standby.prepare_image). With image_download_source=local
// Anvil downloads and verifies the image first, and the agent fetches it
// from Anvil's cache.
func (c *Conductor) writeImage(ctx context.Context, n *ent.Node, ph phase) (string, error) {
	r, err := c.agentFor(ctx, n, ph)
	if err != nil {
		return "", err
	}
	var cd any
	if raw, ok := n.InstanceInfo["configdrive"]; ok {
		if cd, err = configDriveFor(n.UUID, raw); err != nil {
			return "", err
		}
	}
	info := imageInfo(n)
	if src, _ := downloadSource(n); src == "local" {
		u, token, err := c.cacheImage(ctx, n)
		if err != nil {
			return "", err
		}
		// The agent needs the URL only while it downloads, which
		// prepare_image covers: it goes when the step ends, however.
		defer c.images.Unlink(token)
		info.URLs = []string{u}
	}
	cmd, err := r.cl.PrepareImage(ctx, info, cd)
	if err != nil {
		return "", err
	}
	if !cmd.Done() {
		if _, err := c.followCommand(ctx, n, r.cl, "standby.prepare_image"); err != nil {
			return "", err
		}
	}
	return "", nil
}

// prepareInstanceBoot makes the disk the machine's boot device for good.
func (c *Conductor) prepareInstanceBoot(ctx context.Context, n *ent.Node, _ phase) (string, error) {
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	err = cl.SetBootDevice(ctx, "disk", true, BootMode(n))
	c.noteBMC(ctx, n, err)
	return "", err
}

// tearDownAgent powers the machine off through its BMC, ejects the
// agent's CD and forgets the agent. Ironic first asks the agent to power
// off (standby.power_off) and falls back to the BMC; Anvil goes to the
// BMC at once, which always works and never has an agent run poweroff.
func (c *Conductor) tearDownAgent(ctx context.Context, n *ent.Node, _ phase) (string, error) {
	r := c.agents.take(n.ID)
	// The ISO goes whatever the BMC does: the agent's run is over.
	defer c.dropBootISO(n)
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	if r != nil && r.how == bootVMedia {
		err := bmc.EjectISO(ctx, cl)
		c.noteBMC(ctx, n, err)
		if err != nil {
			return "", err
		}
	}
	final, err := bmc.Power(ctx, cl, bmc.PowerOff, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
	c.noteBMC(ctx, n, err)
	if err != nil {
		return "", err
	}
	if err := c.durably(ctx, func() error { return ramdisk.Wipe(ctx, c.db, n) }); err != nil {
		return "", fmt.Errorf("forgetting the ramdisk agent: %w", err)
	}
	return final, nil
}

// bootInstance powers the machine on into its instance.
func (c *Conductor) bootInstance(ctx context.Context, n *ent.Node, _ phase) (string, error) {
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	final, err := bmc.Power(ctx, cl, bmc.PowerOn, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
	c.noteBMC(ctx, n, err)
	return final, err
}
