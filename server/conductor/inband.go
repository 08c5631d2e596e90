package conductor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/port"
	"github.com/anvilproject/anvil/server/agent"
	"github.com/anvilproject/anvil/server/agentlogs"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bootiso"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/imagecache"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/ramdisk"
)

// AgentConfig tunes how the conductor drives the ramdisk agent
// (ironic-python-agent) on a machine.
type AgentConfig struct {
	// BootTimeout is how long a machine booted into the agent has to
	// send its first heartbeat (Ironic's [conductor]
	// deploy_callback_timeout and clean_callback_timeout, 1800 s).
	BootTimeout time.Duration
	// InspectWaitTimeout is how long an in-band inspection may wait in
	// inspect wait for the agent's inventory, counted from the start of
	// the inspection, whether or not the agent heartbeats meanwhile
	// (Ironic's [conductor]inspect_wait_timeout, 1800 s).
	InspectWaitTimeout time.Duration
	// HeartbeatTimeout is how long a running agent may go unanswered
	// before its step fails (Ironic's [api]ramdisk_heartbeat_timeout,
	// 300 s); lookups tell agents to heartbeat well within it.
	HeartbeatTimeout time.Duration
	// Poll is how often a running command's status is read. Ironic reads
	// it at each heartbeat; reading it directly ends a step sooner.
	Poll time.Duration
	// LogDir keeps the agent's logs of each failed run, one gzipped
	// tarball per failure (Ironic's [agent]deploy_logs_local_path with
	// deploy_logs_collect "on_failure"); the app gives it its default
	// in the state directory. LogMaxPerNode, LogMaxAge and LogMaxBytes
	// are its retention (agentlogs.Store); zero means the agentlogs
	// default.
	LogDir        string
	LogMaxPerNode int
	LogMaxAge     time.Duration
	LogMaxBytes   int64
	// Wipe is how deep automated cleaning erases the disks between
	// tenants: WipeMetadata, WipeExpress or WipeFull; "" is WipeExpress.
	// A node's driver_info/anvil_wipe overrides it (wipe.go).
	Wipe string
	// WipePasses is how many passes of random data a full overwrite
	// writes before its pass of zeros (Ironic's [deploy]
	// erase_devices_iterations; the agent's shred); 0 writes zeros only.
	WipePasses int
	// FastTrack leaves the agent running after cleaning succeeds, the
	// machine on, so a deploy that follows while the agent still
	// heartbeats skips the reboot (Ironic's [deploy]fast_track).
	FastTrack bool
	// ImageURL is the base URL agents fetch cached images from
	// (image_download_source=local): a deploy's image is at
	// ImageURL/<token>. Empty means http://<listen address>/images.
	ImageURL string
	// ImageCacheDir keeps the images the conductor downloads for
	// image_download_source=local, under their checksums.
	ImageCacheDir string
	// ImageCacheMaxBytes bounds the cache (and so one image);
	// ImageDownloadTimeout bounds one download. Zero means the
	// imagecache defaults.
	ImageCacheMaxBytes   int64
	ImageDownloadTimeout time.Duration
	// ImageCacheMetrics counts the cache's hits, misses, failures and
	// evictions; nil counts none.
	ImageCacheMetrics *imagecache.Metrics
	// Client holds the agent client's options: the provisioning
	// networks agents may call back from.
	Client agent.Options
	// APIURL is Anvil's address as agents reach it, which an ISO Anvil
	// builds passes them as ipa-api-url; empty means the listener's
	// (config.PublicURL), set when the conductor starts.
	APIURL string
	// TokenOnMedia pregenerates the agent's token for a boot from a
	// medium Anvil writes (the ISO it builds, its per-MAC iPXE script)
	// and puts it on the kernel line, as Ironic's redfish virtual media
	// does: no lookup then issues one (--agent-token-on-media). An
	// inspection's medium always carries its token, in the inventory's
	// callback URL, whatever this says.
	TokenOnMedia bool
	// Discovery lets inspection data without the node's token find a
	// node by MAC or BMC address (--inspection-discovery).
	Discovery bool
	// ISOs keeps the ISOs Anvil builds for redfish-virtual-media nodes
	// that give deploy_kernel and deploy_ramdisk instead of deploy_iso,
	// and serves them to BMCs; nil builds none.
	ISOs *bootiso.Store
	// Media are the agent boot media of nodes whose driver_info names
	// none (Ironic's [conductor] defaults).
	Media ramdisk.Media
}

func (a AgentConfig) withDefaults() AgentConfig {
	if a.BootTimeout <= 0 {
		a.BootTimeout = 30 * time.Minute
	}
	if a.LogMaxPerNode <= 0 {
		a.LogMaxPerNode = agentlogs.DefaultMaxPerNode
	}
	if a.LogMaxAge <= 0 {
		a.LogMaxAge = agentlogs.DefaultMaxAge
	}
	if a.LogMaxBytes <= 0 {
		a.LogMaxBytes = agentlogs.DefaultMaxBytes
	}
	if a.InspectWaitTimeout <= 0 {
		a.InspectWaitTimeout = 30 * time.Minute
	}
	if a.HeartbeatTimeout <= 0 {
		a.HeartbeatTimeout = ramdisk.DefaultHeartbeatTimeout * time.Second
	}
	if a.Poll <= 0 {
		a.Poll = 2 * time.Second
	}
	return a
}

// How a node boots the agent: from a virtual CD its BMC downloads, or
// from the network the operator's DHCP/PXE serves.
const (
	bootVMedia  = "virtual media"
	bootNetwork = "network"
)

// agentBoot says how n boots its agent, or why it cannot: a
// redfish-virtual-media node boots driver_info.deploy_iso, or else an ISO
// Anvil builds for each boot from deploy_kernel, deploy_ramdisk and
// bootloader (bootISOSetup); a pxe or ipxe node needs deploy_kernel and
// deploy_ramdisk, which the operator's DHCP/TFTP serves (Anvil runs no
// DHCP); a bmclib node boots from the network too, so its provider must
// set the boot device. fake-hardware has no machine. Kernel, ramdisk and
// bootloader are the node's or the server's defaults (m). A refusal is a
// *bootSetupError naming the field to set.
func agentBoot(n *ent.Node, m ramdisk.Media) (string, error) {
	d := bmc.Canonical(n.Driver)
	if d != "redfish" && d != "ipmi" && d != "bmclib" {
		return "", &bootSetupError{"driver", fmt.Sprintf("driver %s has no machine to boot a ramdisk agent on", n.Driver)}
	}
	if p, _ := n.DriverInfo["bmclib_provider"].(string); d == "bmclib" && !bmc.BmclibOffers(p, "management.set_boot_device") {
		// Powering on without pxe set would boot whatever the disk holds.
		return "", &bootSetupError{"driver_info/bmclib_provider", fmt.Sprintf("bmclib provider %s cannot set the boot device, so it cannot boot the machine into a ramdisk agent from the network", p)}
	}
	view := &nodes.View{Node: n}
	switch iface := view.Interface("boot"); iface {
	case "redfish-virtual-media":
		if iso, _ := n.DriverInfo["deploy_iso"].(string); iso != "" {
			return bootVMedia, nil
		}
		if err := bootISOSetup(n, iface, m); err != nil {
			return "", err
		}
		return bootVMedia, nil
	case "pxe", "ipxe":
		k, _ := m.Get(n, "deploy_kernel")
		r, _ := m.Get(n, "deploy_ramdisk")
		if k == "" || r == "" {
			return "", &bootSetupError{"driver_info/deploy_kernel", fmt.Sprintf("boot interface %s boots the agent from deploy_kernel and deploy_ramdisk, which neither driver_info nor the server's defaults (anvil serve --deploy-kernel, --deploy-ramdisk) set both of", iface)}
		}
		return bootNetwork, nil
	default:
		return "", &bootSetupError{"boot_interface", fmt.Sprintf("boot interface %s cannot boot a ramdisk agent", iface)}
	}
}

// bootSetupError is what a node lacks to boot the agent, and the field
// (as a 400 names it) to set.
type bootSetupError struct{ field, msg string }

func (e *bootSetupError) Error() string { return e.msg }

// HasAgentPath tells whether a node is set up to boot the ramdisk agent,
// with the server's default media m, and so whether automated cleaning
// can wipe it.
func HasAgentPath(n *ent.Node, m ramdisk.Media) bool {
	_, err := agentBoot(n, m)
	return err == nil
}

// agentRun is the agent of one run of steps: booted by the run's first
// step that needs it, torn down when the run ends.
type agentRun struct {
	cl       *agent.Client
	how      string
	steps    *agent.Steps
	versions map[string]any
}

// agents holds the running agents by node id.
type agents struct {
	mu  sync.Mutex
	run map[int]*agentRun
}

func (a *agents) get(id int) *agentRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.run[id]
}

func (a *agents) put(id int, r *agentRun) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.run == nil {
		a.run = map[int]*agentRun{}
	}
	a.run[id] = r
}

func (a *agents) take(id int) *agentRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.run[id]
	delete(a.run, id)
	return r
}

// errAgentTimeout fails a run whose agent never called back.
var errAgentTimeout = errors.New("the ramdisk agent timed out")

// agentFor returns the node's agent for this run, booting the machine
// into it first when the run has none yet.
func (c *Conductor) agentFor(ctx context.Context, n *ent.Node, ph phase) (*agentRun, error) {
	if r := c.agents.get(n.ID); r != nil && r.cl != nil {
		return r, nil
	}
	how, err := agentBoot(n, c.cfg.Agent.Media)
	if err != nil {
		return nil, err
	}
	if cl := c.fastTracked(ctx, n); cl != nil {
		r := &agentRun{cl: cl, how: how}
		c.agents.put(n.ID, r)
		return r, nil
	}
	// A token from an earlier boot must never be accepted: this boot's
	// lookup issues a fresh one.
	if err := c.durably(ctx, func() error { return ramdisk.Wipe(ctx, c.db, n) }); err != nil {
		return nil, err
	}
	if err := c.pregenerateToken(ctx, n, how, false); err != nil {
		return nil, err
	}
	if err := c.setRunState(ctx, n, ph.wait); err != nil {
		return nil, err
	}
	// From here the run's end tears the boot down (power off, eject),
	// whether or not the agent ever calls back.
	r := &agentRun{how: how}
	c.agents.put(n.ID, r)
	if err := c.bootIntoAgent(ctx, n, how); err != nil {
		return nil, err
	}
	cl, err := c.awaitAgent(ctx, n)
	if err != nil {
		return nil, err
	}
	if err := c.setRunState(ctx, n, ph.running); err != nil {
		return nil, err
	}
	r.cl = cl
	return r, nil
}

// fastTracked is a client for the agent cleaning left running, when fast
// track is on, the machine is on and the agent answers now with the
// node's token; nil otherwise. Ironic trusts a heartbeat younger than its
// fast_track_timeout; asking the agent is the stronger proof, and an
// agent that is not the one the token was issued to refuses the call.
func (c *Conductor) fastTracked(ctx context.Context, n *ent.Node) *agent.Client {
	info := n.DriverInternalInfo
	url, _ := info[ramdisk.KeyURL].(string)
	token, _ := info[ramdisk.KeyToken].(string)
	if !c.cfg.Agent.FastTrack || url == "" || token == "" || token == ramdisk.MaskedToken ||
		n.PowerState == nil || *n.PowerState != bmc.PowerOn {
		return nil
	}
	ca, _ := info[ramdisk.KeyVerifyCA].(string)
	cl, err := agent.New(n.UUID, url, token, []byte(ca), c.cfg.Agent.Client)
	if err != nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cl.GetCommandsStatus(pctx); err != nil {
		return nil
	}
	return cl
}

// setRunState moves a node this conductor holds between a phase's
// running and wait states.
func (c *Conductor) setRunState(ctx context.Context, n *ent.Node, state string) error {
	return c.durably(ctx, func() error {
		return c.db.Node.Update().Where(node.ID(n.ID), node.Reservation(c.cfg.Name)).SetProvisionState(state).SetProvisionUpdatedAt(time.Now()).Exec(ctx)
	})
}

// bootIntoAgent boots the machine once from the agent's media and
// restarts it (or powers it on), as Ironic's prepare_ramdisk and reboot.
func (c *Conductor) bootIntoAgent(ctx context.Context, n *ent.Node, how string) error {
	cl, err := c.client(n)
	if err != nil {
		return err
	}
	defer cl.Close()
	if how == bootVMedia {
		iso, _ := n.DriverInfo["deploy_iso"].(string)
		if iso == "" {
			// The run's end removes it (dropBootISO), booted or not.
			if iso, err = c.buildBootISO(ctx, n); err != nil {
				return err
			}
		}
		err = bmc.BootFromISO(ctx, cl, iso, BootMode(n))
	} else {
		err = cl.SetBootDevice(ctx, "pxe", false, BootMode(n))
	}
	c.noteBMC(ctx, n, err)
	if err != nil {
		return err
	}
	final, err := bmc.Power(ctx, cl, bmc.Rebooting, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
	c.noteBMC(ctx, n, err)
	if err != nil {
		return err
	}
	// The machine runs now, whatever the run's later writes carry.
	n.PowerState = &final
	return c.durably(ctx, func() error {
		return c.db.Node.Update().Where(node.ID(n.ID), node.Reservation(c.cfg.Name)).SetPowerState(final).Exec(ctx)
	})
}

// pregenerateToken gives a boot from a medium Anvil writes its agent
// token before the node enters the state that waits for the agent, and
// so before the medium is written: the ISO Anvil builds (no deploy_iso)
// or the iPXE script it serves (a network boot). With TokenOnMedia off,
// only an inspection's boot gets one, for its callback URL. An
// operator's deploy_iso gets none: its agent's lookup issues the token.
func (c *Conductor) pregenerateToken(ctx context.Context, n *ent.Node, how string, inspection bool) error {
	iso, _ := n.DriverInfo["deploy_iso"].(string)
	ours := how == bootNetwork || how == bootVMedia && iso == ""
	if !ours || !c.cfg.Agent.TokenOnMedia && !inspection {
		return nil
	}
	return c.durably(ctx, func() error {
		_, err := ramdisk.Pregenerate(ctx, c.db, n)
		return err
	})
}

// awaitAgent waits for the booted agent's lookup and first heartbeat,
// which leave its token and callback URL in driver_internal_info, and
// returns a client for it. n's copy takes the agent's keys, so the run's
// later writes of driver_internal_info keep them.
func (c *Conductor) awaitAgent(ctx context.Context, n *ent.Node) (*agent.Client, error) {
	deadline := time.Now().Add(c.cfg.Agent.BootTimeout)
	t := time.NewTicker(abortPoll * 5)
	defer t.Stop()
	for {
		cur, err := c.db.Node.Query().Where(node.ID(n.ID)).Select(node.FieldDriverInternalInfo).Only(ctx)
		if err != nil && !c.shuttingDown() {
			return nil, err
		}
		if cur != nil {
			info := cur.DriverInternalInfo
			if cur.DriverInternalInfo[abortRequestedField] == true {
				return nil, errAborted
			}
			url, _ := info[ramdisk.KeyURL].(string)
			token, _ := info[ramdisk.KeyToken].(string)
			if url != "" && token != "" && token != ramdisk.MaskedToken {
				ca, _ := info[ramdisk.KeyVerifyCA].(string)
				for _, k := range slices.Concat(ramdisk.AgentKeys, []string{ramdisk.KeyLastHeartbeat, ramdisk.KeyVersion}) {
					if v, ok := info[k]; ok {
						n.DriverInternalInfo[k] = v
					}
				}
				return agent.New(n.UUID, url, token, []byte(ca), c.cfg.Agent.Client)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: it did not call back within %s of the boot", errAgentTimeout, c.cfg.Agent.BootTimeout)
		}
		select {
		case <-c.ctx.Done():
			return nil, errShutdown
		case <-t.C:
		}
	}
}

func (c *Conductor) shuttingDown() bool { return c.ctx.Err() != nil }

// agentNode is the node as Ironic's conductor sends it with step
// commands: what the agent reads (properties' and instance_info's root
// device hints, driver_info's burn-in and erase settings), secrets
// masked, the agent's own token left out.
func agentNode(n *ent.Node) map[string]any {
	internal := map[string]any{}
	for k, v := range n.DriverInternalInfo {
		if k != ramdisk.KeyToken {
			internal[k] = v
		}
	}
	return map[string]any{
		"uuid": n.UUID, "name": n.Name, "driver": n.Driver, "provision_state": n.ProvisionState,
		"properties": n.Properties, "instance_info": nodes.MaskInstanceInfo(n.InstanceInfo),
		"driver_info": nodes.MaskSecrets(n.DriverInfo), "driver_internal_info": internal,
		"target_raid_config": n.TargetRaidConfig, "raid_config": n.RaidConfig,
	}
}

// agentPorts are the node's ports as the agent sees them.
func (c *Conductor) agentPorts(ctx context.Context, n *ent.Node) ([]map[string]any, error) {
	ps, err := c.db.Port.Query().Where(port.NodeID(n.ID)).All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(ps))
	for i, p := range ps {
		out[i] = map[string]any{"uuid": p.UUID, "address": p.Address, "pxe_enabled": p.PxeEnabled}
	}
	return out, nil
}

// inBandStep runs one of the agent's steps: the agent lists its steps
// once per run (get_clean_steps and so on), which gives the step's
// priority and the hardware managers' versions, then runs it
// (execute_clean_step) while the conductor follows its status.
func (c *Conductor) inBandStep(ctx context.Context, n *ent.Node, ph phase, st Step) error {
	r, err := c.agentFor(ctx, n, ph)
	if err != nil {
		return err
	}
	kind := ph.kind
	ports, err := c.agentPorts(ctx, n)
	if err != nil {
		return err
	}
	nm := agentNode(n)
	if st.Interface == "raid" && st.Step == "create_configuration" {
		if err := c.raidTarget(ctx, n, nm, st); err != nil {
			return err
		}
	}
	if r.steps == nil {
		var steps *agent.Steps
		switch kind {
		case "clean":
			steps, err = r.cl.GetCleanSteps(ctx, nm, ports)
		case "service":
			steps, err = r.cl.GetServiceSteps(ctx, nm, ports)
		default:
			steps, err = r.cl.GetDeploySteps(ctx, nm, ports)
		}
		if err != nil {
			return err
		}
		r.steps, r.versions = steps, steps.Versions
	}
	found, ok := r.steps.Find(st.Interface, st.Step)
	if !ok {
		return fmt.Errorf("the ramdisk agent of node %s offers no %s step %s", n.UUID, kind, st.Name())
	}
	wipe, skip, err := c.wipeStep(ctx, n, r, st, nm)
	if err != nil || skip {
		return err
	}
	step := agent.Step{Interface: st.Interface, Step: st.Step, Priority: found.Priority, Args: st.Args}
	if step.Args == nil {
		step.Args = map[string]any{}
	}
	var cmd *agent.Command
	switch kind {
	case "clean":
		cmd, err = r.cl.ExecuteCleanStep(ctx, step, nm, ports, r.versions)
	case "service":
		cmd, err = r.cl.ExecuteServiceStep(ctx, step, nm, ports, r.versions)
	default:
		cmd, err = r.cl.ExecuteDeployStep(ctx, step, nm, ports, r.versions)
	}
	if err != nil {
		return err
	}
	if !cmd.Done() {
		if cmd, err = c.followCommand(ctx, n, r.cl, kind+".execute_"+kind+"_step"); err != nil {
			return err
		}
	}
	if st.Interface == "raid" {
		return c.afterAgentRAID(ctx, n, kind, st, cmd)
	}
	if wipe != nil {
		wipe.done(st, cmd, c.cfg.Agent.WipePasses)
	}
	return nil
}

// raidTarget puts what the agent's software RAID builds into nm, the node
// as sent with the step: the node's current target_raid_config (it may
// have changed since the run was asked for), and in
// driver_internal_info.target_raid_config the part this step builds, as
// Ironic's AgentRAID.create_configuration filters it. Nothing to build
// fails the step before the agent is asked.
func (c *Conductor) raidTarget(ctx context.Context, n *ent.Node, nm map[string]any, st Step) error {
	cur, err := c.db.Node.Get(ctx, n.ID)
	if err != nil {
		return err
	}
	disks, err := filterTarget(cur, boolArg(st, "create_root_volume", true), boolArg(st, "create_nonroot_volumes", true))
	if err != nil {
		return err
	}
	internal, _ := nm["driver_internal_info"].(map[string]any)
	internal["target_raid_config"] = map[string]any{"logical_disks": disks}
	nm["target_raid_config"] = cur.TargetRaidConfig
	return nil
}

// afterAgentRAID records what the agent's RAID step left, as Ironic's
// post-step hooks do: create (and the deploy step apply) store the
// configuration the agent reports built, and one that reports none fails
// the step; delete empties raid_config.
func (c *Conductor) afterAgentRAID(ctx context.Context, n *ent.Node, kind string, st Step, cmd *agent.Command) error {
	if st.Step == "delete_configuration" {
		return c.recordRAID(ctx, n, map[string]any{})
	}
	var res map[string]json.RawMessage
	var cfg map[string]any
	if cmd != nil && json.Unmarshal(cmd.Result, &res) == nil {
		_ = json.Unmarshal(res[kind+"_result"], &cfg)
	}
	if len(cfg) == 0 {
		return fmt.Errorf("the ramdisk agent of node %s reported no RAID configuration after %s (is a logical disk's controller software?)", n.UUID, st.Name())
	}
	disks, _ := cfg["logical_disks"].([]any)
	roots := 0
	for _, d := range disks {
		if m, _ := d.(map[string]any); m["is_root_volume"] == true {
			roots++
		}
	}
	if roots > 1 {
		return fmt.Errorf("the ramdisk agent of node %s reported %d root volumes after %s; a RAID configuration has at most one", n.UUID, roots, st.Name())
	}
	cfg["last_updated"] = time.Now().UTC().Format("2006-01-02 15:04:05.000000")
	return c.recordRAID(ctx, n, cfg)
}

// followCommand polls an agent command until it ends. An agent that
// does not answer is polled again (it may be busy writing an image) until
// it has been silent for the heartbeat timeout, when it is taken for
// gone, as Ironic fails a node whose agent stops heartbeating.
func (c *Conductor) followCommand(ctx context.Context, n *ent.Node, cl *agent.Client, name string) (*agent.Command, error) {
	lastSeen := time.Now()
	t := time.NewTicker(c.cfg.Agent.Poll)
	defer t.Stop()
	for {
		cmd, err := cl.LastCommand(ctx, name)
		var ce *agent.ConnectionError
		switch {
		case err == nil && cmd.Done():
			return cmd, nil
		case err == nil:
			lastSeen = time.Now()
		case errors.As(err, &ce):
			if time.Since(lastSeen) > c.cfg.Agent.HeartbeatTimeout {
				return nil, fmt.Errorf("%w: it stopped answering during %s (silent for %s): %v",
					errAgentTimeout, name, c.cfg.Agent.HeartbeatTimeout, err)
			}
		default:
			return cmd, err
		}
		select {
		case <-c.ctx.Done():
			return nil, errShutdown
		case <-t.C:
		}
	}
}

// endAgent tears the run's agent down when the run ends: on a failure it
// first keeps the agent's logs; then it powers the machine off (cleaning,
// a failure) or boots it back into its instance (servicing), ejects the
// agent's CD, and forgets the agent's token and URL. It reports whether
// the run had an agent.
func (c *Conductor) endAgent(ctx context.Context, n *ent.Node, ph phase, failure string) bool {
	r := c.agents.take(n.ID)
	if r == nil {
		return false
	}
	if failure == "" && ph.kind == "clean" && c.cfg.Agent.FastTrack && r.cl != nil {
		_ = history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Type: ph.kind, Conductor: c.cfg.Name,
			Message: "The ramdisk agent stays up for fast track; a deploy within the heartbeat timeout reuses it"})
		return true
	}
	if failure != "" && r.cl != nil {
		c.wipes.setLog(n.ID, c.keepAgentLogs(ctx, n, ph.kind, r.cl))
	}
	cl, err := c.client(n)
	if err == nil {
		if r.how == bootVMedia {
			err = bmc.EjectISO(ctx, cl)
			c.noteBMC(ctx, n, err)
		}
		target := bmc.PowerOff
		if failure == "" && ph.kind == "service" {
			// Servicing ends with the instance running again.
			if err = cl.SetBootDevice(ctx, "disk", true, BootMode(n)); err == nil {
				target = bmc.Rebooting
			}
		}
		if err == nil && (target != bmc.PowerOff || !n.DisablePowerOff) {
			var final string
			final, err = bmc.Power(ctx, cl, target, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
			c.noteBMC(ctx, n, err)
			if err == nil {
				n.PowerState = &final
			}
		}
		cl.Close()
	}
	c.dropBootISO(n)
	if err != nil {
		c.log.Warn("tearing the ramdisk agent down", "node", n.UUID, "err", err)
		_ = history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Severity: history.Warning, Type: ph.kind, Conductor: c.cfg.Name,
			Message: "Could not power the machine off after its ramdisk agent: " + bmc.Summary(err)})
	}
	if err := c.durably(ctx, func() error { return ramdisk.Wipe(ctx, c.db, n) }); err != nil {
		c.log.Error("forgetting the ramdisk agent", "node", n.UUID, "err", err)
	}
	return true
}

// keepAgentLogs asks the agent for its logs and keeps them in the log
// store under a name that stays the same while the log is kept, and
// says so in the node's history; it returns the name ("" when none was
// kept), by which records of the run refer to the log. The event's type
// is the failed run's kind, which the log's listing shows.
func (c *Conductor) keepAgentLogs(ctx context.Context, n *ent.Node, kind string, cl *agent.Client) string {
	if c.logs == nil {
		return ""
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ev := history.Event{NodeID: n.ID, Severity: history.Warning, Type: kind, Conductor: c.cfg.Name}
	tgz, err := cl.CollectSystemLogs(lctx)
	var name string
	if err == nil {
		name, err = c.logs.Save(n.UUID, tgz)
		ev.Message = agentlogs.KeptMessage(len(tgz), name)
	}
	if err != nil {
		c.log.Warn("keeping the ramdisk agent's logs", "node", n.UUID, "err", err)
		ev.Message, name = "Could not keep the ramdisk agent's logs: "+err.Error(), ""
	}
	_ = history.Record(ctx, c.db.Client, ev)
	return name
}

// InBand says whether a step runs in the ramdisk agent on any node: the
// agent's catalogued steps, and any deploy-interface step Anvil does not
// run itself, as Ironic hands those to the agent.
func InBand(iface, step string) bool {
	s := lookupStep(iface, step)
	return s != nil && s.InBand || s == nil && iface == "deploy"
}

// inBandOn says whether a step runs in the agent on node n: besides
// InBand's, every RAID step of a node whose raid_interface is agent
// (Ironic's AgentRAID hands each to the agent's software RAID), where the
// same step names are out of band for raid_interface redfish.
func inBandOn(n *ent.Node, iface, step string) bool {
	return InBand(iface, step) || agentRAID(n) && iface == "raid"
}

func agentRAID(n *ent.Node) bool {
	return (&nodes.View{Node: n}).Interface("raid") == "agent"
}

// firstInBand names the first step of steps that runs in the agent on n,
// or "".
func firstInBand(n *ent.Node, steps []Step) string {
	i := slices.IndexFunc(steps, func(s Step) bool { return inBandOn(n, s.Interface, s.Step) })
	if i < 0 {
		return ""
	}
	return steps[i].Name()
}

// automatedCleanSteps are what cleaning runs between tenants: the
// steps of the node's wipe policy (wipe.go). A node with automated_clean
// false (Ironic's opt-out) or fake hardware (no disks) has none, and its
// cleaning passes straight through with a record that says it was not
// wiped. A node that cannot boot the agent still gets the steps: its
// cleaning then fails closed (runSteps), never passes to available.
func (c *Conductor) automatedCleanSteps(n *ent.Node) []Step {
	if noWipe(n) != "" {
		return nil
	}
	return wipeSteps(c.WipePolicy(n))
}
