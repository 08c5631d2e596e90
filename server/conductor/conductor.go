// Package conductor drives nodes' hardware: power and boot-device calls,
// the cleaning and servicing state machine, node locks, conductor
// heartbeats with takeover of a lost conductor's nodes, and power sync.
// It runs inside anvil serve; with PostgreSQL every replica runs one.
package conductor

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/conductor"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/agentlogs"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/config"
	"github.com/anvilproject/anvil/server/egress"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/fwimages"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/imagecache"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/listing"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// Config tunes a conductor.
type Config struct {
	// Name identifies this conductor in locks and heartbeats; keep it
	// stable across restarts so a restart recognises its own stale work.
	Name string
	// Group is the conductor_group whose nodes this conductor serves;
	// "" serves the nodes of the default group "".
	Group string
	// Heartbeat is how often the row is refreshed; a conductor silent for
	// HeartbeatTimeout is lost and its nodes are taken over.
	Heartbeat, HeartbeatTimeout time.Duration
	// PowerSync is the period of the power-state sync (0 turns it off);
	// PowerSyncWorkers bounds its concurrent BMC calls.
	PowerSync        time.Duration
	PowerSyncWorkers int
	// PowerTimeout bounds the wait for a BMC to report the requested power
	// state (Ironic's conductor.power_timeout); a request's timeout wins.
	PowerTimeout time.Duration
	// BMCResetTimeout bounds the wait, after reset_bmc, for the BMC to
	// answer again; the step ends only then.
	BMCResetTimeout time.Duration
	// FirmwareUnresponsiveBMCWait is how long firmware.update waits out
	// a BMC that stops answering (or answers 5xx) while and after it
	// flashes, before the step fails; default 8 minutes, Ironic's
	// firmware_update_resource_validation_timeout.
	FirmwareUnresponsiveBMCWait time.Duration
	// BMC bounds the BMC calls and, through its Metrics, counts them.
	BMC bmc.Options
	// Metrics counts the steps run; nil counts none.
	Metrics *Metrics
	// BMCNetworks is the BMC address allow-list (empty: any); it applies
	// process-wide, to enrolment as well as to connections.
	BMCNetworks []netip.Prefix
	// BMCCADir is the only directory CA bundle paths in driver_info may
	// name ("": none); process-wide, as BMCNetworks.
	BMCCADir string
	// ImageSourceNetworks, when set, are the only networks Anvil fetches
	// from for a tenant (image_source, driver_info's deploy_kernel and
	// kin); unset, it fetches from anywhere but loopback, link-local, the
	// BMC and agent networks and its own addresses (egress.Policy).
	ImageSourceNetworks []netip.Prefix
	// FirmwareImages is Anvil's firmware image store, from which
	// firmware.update pushes images to BMCs that cannot pull them.
	FirmwareImages *fwimages.Store
	// Agent tunes the in-band work (inband.go).
	Agent AgentConfig
	// Console places the ipmitool-socat listeners (console.go).
	Console ConsoleConfig
	// LeaseCheck is how often the allocation loop ends the leases past
	// their end (allocations.go), and the leasing loop starts and ends
	// leases (leasing.go); default 30 seconds.
	LeaseCheck time.Duration
	// CampaignCheck is how often the campaign loop looks for nodes whose
	// run ended and room to start more (campaigns.go); default 1 second,
	// since a node's turn waits for it.
	CampaignCheck time.Duration
}

func (c Config) withDefaults() Config {
	if c.Heartbeat <= 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = 6 * c.Heartbeat
	}
	if c.PowerSyncWorkers <= 0 {
		c.PowerSyncWorkers = 16
	}
	if c.PowerTimeout <= 0 {
		c.PowerTimeout = 60 * time.Second
	}
	if c.BMCResetTimeout <= 0 {
		c.BMCResetTimeout = 5 * time.Minute
	}
	if c.FirmwareUnresponsiveBMCWait <= 0 {
		c.FirmwareUnresponsiveBMCWait = 8 * time.Minute
	}
	if c.LeaseCheck <= 0 {
		c.LeaseCheck = 30 * time.Second
	}
	if c.CampaignCheck <= 0 {
		c.CampaignCheck = time.Second
	}
	c.Agent = c.Agent.withDefaults()
	if c.Console.Host == "" {
		c.Console.Host = "127.0.0.1"
	}
	return c
}

// egressPolicy is where fetches for a tenant may go.
func (c Config) egressPolicy() *egress.Policy {
	p := &egress.Policy{Allow: c.ImageSourceNetworks, Own: egress.OwnAddrs()}
	for _, n := range c.BMCNetworks {
		p.Deny = append(p.Deny, egress.Network{Prefix: n, Flag: "--bmc-networks"})
	}
	for _, n := range c.Agent.Client.Networks {
		p.Deny = append(p.Deny, egress.Network{Prefix: n, Flag: "--agent-networks"})
	}
	return p
}

// Conductor is this process's conductor.
type Conductor struct {
	cfg  Config
	db   *store.DB
	log  *slog.Logger
	work sync.WaitGroup
	// ctx ends when the conductor stops; running work watches it.
	ctx    context.Context
	cancel context.CancelFunc
	// commits groups step writes (runner.go).
	commits committer
	// agents are the ramdisk agents runs have booted (inband.go).
	agents agents
	// wipes follow automated cleanings to their wipe records (wipe.go).
	wipes wipeRuns
	// bootISOs are the ISOs built for agent boots, by node id
	// (bootiso.go).
	bootISOs bootISOs
	// authFails counts each node's consecutive credential refusals; at
	// maxAuthFailures the node goes into maintenance (faults.go).
	authMu    sync.Mutex
	authFails map[int]int
	// hbSince is when this conductor's heartbeats began to succeed
	// without a failure since (zero: the last one failed); see takeOver.
	hbMu    sync.Mutex
	hbSince time.Time
	// rings caches the hash rings for the API (ring.go).
	ringMu  sync.Mutex
	rings   Rings
	ringsAt time.Time
	// alloc settles allocations when set (allocations.go).
	alloc Allocator
	// camp rolls runbooks over nodes (campaigns.go); nil runs none.
	camp Campaigner
	// ports creates the ports inspection finds when set (inspect.go).
	ports PortMaker
	// leases starts and ends leasing's leases when set (leasing.go).
	leases Leaser
	// inbox, when set, tells a node's tenant and owner of its wipe
	// (wipe.go).
	inbox *inbox.Service
	// images caches images for image_download_source=local
	// (agentdeploy.go).
	images *imagecache.Cache
	// fetch is the client of every fetch for a tenant: the image cache's
	// downloads, the HEAD before a deploy, the driver_info media of a
	// built ISO.
	fetch *http.Client
	// cons are the consoles this conductor listens for (console.go).
	cons consoles
	// logs keeps the agent logs of failed runs (inband.go).
	logs *agentlogs.Store
}

// New returns a conductor; Start registers it and starts its loops.
func New(db *store.DB, log *slog.Logger, cfg Config) *Conductor {
	ctx, cancel := context.WithCancel(context.Background())
	bmc.SetNetworks(cfg.BMCNetworks)
	bmc.SetCADir(cfg.BMCCADir)
	c := &Conductor{cfg: cfg.withDefaults(), db: db, log: log, ctx: ctx, cancel: cancel, authFails: map[int]int{}}
	c.fetch = c.cfg.egressPolicy().Client()
	c.images = &imagecache.Cache{Dir: c.cfg.Agent.ImageCacheDir, MaxBytes: c.cfg.Agent.ImageCacheMaxBytes, Timeout: c.cfg.Agent.ImageDownloadTimeout, Client: c.fetch,
		Metrics: c.cfg.Agent.ImageCacheMetrics}
	if a := c.cfg.Agent; a.LogDir != "" {
		c.logs = &agentlogs.Store{Dir: a.LogDir, MaxPerNode: a.LogMaxPerNode, MaxAge: a.LogMaxAge, MaxBytes: a.LogMaxBytes}
	}
	return c
}

// AgentLogs is the store of the agent logs failed runs left; nil when
// the conductor keeps none.
func (c *Conductor) AgentLogs() *agentlogs.Store { return c.logs }

// Images is the cache whose images agents fetch at
// imagecache.RoutePrefix + token.
func (c *Conductor) Images() *imagecache.Cache { return c.images }

// Name is the conductor's name, as locks record it.
func (c *Conductor) Name() string { return c.cfg.Name }

// APIURL is Anvil's API as ramdisk agents reach it, settled by Start.
func (c *Conductor) APIURL() string { return c.cfg.Agent.APIURL }

// Start registers the conductor, recovers its own interrupted work from a
// previous run, and starts the heartbeat, takeover and power-sync loops.
// Without a configured name it is the host name and the API's listen
// address, stable across restarts of the same service.
func (c *Conductor) Start(ctx context.Context, listen string) error {
	if c.cfg.Name == "" {
		host, _ := os.Hostname()
		c.cfg.Name = host + "@" + listen
	}
	if c.cfg.Agent.APIURL == "" {
		u, err := config.PublicURL("http", listen)
		if err != nil {
			return fmt.Errorf("the agents' API URL: %w", err)
		}
		c.cfg.Agent.APIURL = u
	}
	if c.cfg.Agent.ImageURL == "" {
		u, err := config.PublicURL("http", listen)
		if err != nil {
			return fmt.Errorf("the agents' image URL: %w", err)
		}
		c.cfg.Agent.ImageURL = u + strings.TrimSuffix(imagecache.RoutePrefix, "/")
	}
	now := time.Now()
	// Update, else create: a restart keeps its row (and its name).
	n, err := c.db.Conductor.Update().Where(conductor.Hostname(c.cfg.Name)).
		SetStartedAt(now).SetHeartbeatAt(now).SetOnline(true).SetDrivers(bmc.Drivers()).SetConductorGroup(c.cfg.Group).Save(ctx)
	if err == nil && n == 0 {
		err = c.db.Conductor.Create().SetHostname(c.cfg.Name).SetStartedAt(now).SetHeartbeatAt(now).
			SetOnline(true).SetDrivers(bmc.Drivers()).SetConductorGroup(c.cfg.Group).Exec(ctx)
	}
	if err != nil {
		return fmt.Errorf("registering conductor %s: %w", c.cfg.Name, err)
	}
	c.hbMu.Lock()
	c.hbSince = now
	c.hbMu.Unlock()
	if c.logs != nil {
		// Logs age while no run fails, too.
		if gone, err := c.logs.Prune(); err != nil {
			c.log.Warn("pruning the agent logs", "dir", c.logs.Dir, "err", err)
		} else if len(gone) > 0 {
			c.log.Info("agent logs past their retention removed", "dir", c.logs.Dir, "removed", len(gone))
		}
	}
	if n, err := c.recover(ctx, c.cfg.Name, "restarted"); err != nil {
		return err
	} else if n > 0 {
		c.log.Warn("recovered interrupted nodes from this conductor's previous run", "nodes", n)
	}
	c.loop(c.cfg.Heartbeat, c.heartbeat)
	c.loop(c.cfg.Heartbeat, c.takeOver)
	if err := c.restoreConsoles(ctx); err != nil {
		return fmt.Errorf("restoring consoles: %w", err)
	}
	c.loop(consoleReconcileEvery, c.reconcileConsoles)
	// The server analyzed the database at start-up; the statistics then
	// follow the fleet as it is enrolled or retired (store.Reanalyze).
	analyzed, err := c.db.Node.Query().Count(ctx)
	if err != nil {
		return err
	}
	c.reanalyzeLoop(analyzed)
	if c.alloc != nil {
		c.allocationLoop()
	}
	if c.camp != nil {
		c.campaignLoop()
	}
	if c.leases != nil {
		c.leasingLoop()
	}
	if c.cfg.PowerSync > 0 {
		c.loop(c.cfg.PowerSync, func(ctx context.Context) error { _, err := c.SyncPower(ctx); return err })
	}
	return nil
}

// reanalyzeEvery is how often the node count is compared with the one
// the planner's statistics were taken at.
const reanalyzeEvery = 10 * time.Minute

// reanalyzeGap spaces the passes enrolment prompts.
const reanalyzeGap = time.Second

func (c *Conductor) loop(every time.Duration, fn func(context.Context) error) {
	c.wakeLoop(every, nil, fn)
}

// wakeLoop runs fn every `every`, and at once when wake signals (a nil
// wake never does).
func (c *Conductor) wakeLoop(every time.Duration, wake <-chan struct{}, fn func(context.Context) error) {
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-wake:
			case <-t.C:
			}
			if err := fn(c.ctx); err != nil && c.ctx.Err() == nil {
				c.log.Error("conductor loop", "err", err)
			}
		}
	}()
}

// reanalyzeLoop keeps the planner's statistics near the fleet's size:
// every reanalyzeEvery for changes made anywhere, and at most
// reanalyzeGap after this process enrols nodes (store.Grew), so a fleet
// enrolled here is planned as what it is by the time it is listed.
func (c *Conductor) reanalyzeLoop(analyzed int) {
	c.wakeLoop(reanalyzeEvery, c.db.Growth(), func(ctx context.Context) error {
		n, err := c.db.Reanalyze(ctx, analyzed)
		analyzed = n
		// Signals that come during the pass and the gap are taken after
		// it, so a burst of enrolments costs a count every reanalyzeGap,
		// the last one after the burst.
		select {
		case <-ctx.Done():
		case <-time.After(reanalyzeGap):
		}
		return err
	})
}

// Stop ends the loops, lets each running step finish, fails the nodes
// whose remaining steps will not run, releases every lock and marks the
// conductor offline.
func (c *Conductor) Stop() {
	c.cancel()
	c.work.Wait()
	// Consoles stay enabled in the database: the next start reopens them.
	c.cons.mu.Lock()
	ids := slices.Collect(maps.Keys(c.cons.open))
	c.cons.mu.Unlock()
	for _, id := range ids {
		c.closeConsole(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.db.Conductor.Update().Where(conductor.Hostname(c.cfg.Name)).SetOnline(false).Exec(ctx)
}

func (c *Conductor) heartbeat(ctx context.Context) error {
	err := c.db.Conductor.Update().Where(conductor.Hostname(c.cfg.Name)).SetHeartbeatAt(time.Now()).SetOnline(true).Exec(ctx)
	c.hbMu.Lock()
	defer c.hbMu.Unlock()
	switch {
	case err != nil:
		c.hbSince = time.Time{}
	case c.hbSince.IsZero():
		c.hbSince = time.Now()
	}
	return err
}

// heartbeatsSteady reports whether this conductor's own heartbeats have
// succeeded for a whole heartbeat timeout. After a database outage every
// conductor's heartbeat is stale, through no fault of its own: judging
// the others before they have had the time to write theirs again would
// take live conductors' nodes from them.
func (c *Conductor) heartbeatsSteady() bool {
	c.hbMu.Lock()
	defer c.hbMu.Unlock()
	return !c.hbSince.IsZero() && time.Since(c.hbSince) >= c.cfg.HeartbeatTimeout
}

// takeOver recovers the nodes of lost conductors: those offline or whose
// heartbeat expired, once this conductor's own heartbeats are steady. Marking one offline is a conditional update, so one
// replica reports the loss; each node a lost conductor held is recovered
// by the live conductor the hash ring maps it to (by the ring of every
// live conductor when none serves its group, so no lock outlives its
// owner), and recovery is conditional on the lock, so it happens once.
func (c *Conductor) takeOver(ctx context.Context) error {
	if !c.heartbeatsSteady() {
		return nil
	}
	dead, err := c.db.Conductor.Query().Where(conductor.HostnameNEQ(c.cfg.Name),
		conductor.Or(conductor.Online(false), conductor.HeartbeatAtLT(time.Now().Add(-c.cfg.HeartbeatTimeout)))).All(ctx)
	if err != nil || len(dead) == 0 {
		return err
	}
	why := map[string]string{}
	for _, d := range dead {
		why[d.Hostname] = "lost (no heartbeat since " + d.HeartbeatAt.UTC().Format(time.RFC3339) + ")"
		if !d.Online {
			continue
		}
		n, err := c.db.Conductor.Update().Where(conductor.ID(d.ID), conductor.Online(true), conductor.HeartbeatAt(d.HeartbeatAt)).
			SetOnline(false).Save(ctx)
		if err == nil && n == 1 {
			c.log.Warn("conductor lost; its nodes go to the others", "conductor", d.Hostname, "last_heartbeat", d.HeartbeatAt)
		}
	}
	held, err := c.db.Node.Query().Where(node.ReservationIn(slices.Collect(maps.Keys(why))...)).All(ctx)
	if err != nil || len(held) == 0 {
		return err
	}
	rings, err := c.loadRings(ctx)
	if err != nil {
		return err
	}
	var everyone *Ring
	for _, n := range held {
		owner := rings.Owner(n.UUID, n.ConductorGroup)
		if owner == "" {
			if everyone == nil {
				var hosts []string
				for _, r := range rings {
					hosts = append(hosts, r.Hosts()...)
				}
				everyone = NewRing(hosts)
			}
			owner = everyone.Owner(n.UUID)
		}
		if owner != c.cfg.Name {
			continue
		}
		if err := c.recoverNode(ctx, n, *n.Reservation, why[*n.Reservation]); err != nil {
			return err
		}
	}
	return nil
}

// failedState is where an interrupted operation leaves a node.
var failedState = map[string]string{
	nodes.StateCleaning: nodes.StateCleanFailed, nodes.StateCleanWait: nodes.StateCleanFailed,
	nodes.StateServicing: nodes.StateServiceFailed, nodes.StateServiceWait: nodes.StateServiceFailed,
	nodes.StateVerifying: nodes.StateEnroll, StateAdopting: nodes.StateManageable,
	StateInspecting: StateInspectFailed, StateInspectWait: StateInspectFailed,
	StateDeploying: StateDeployFailed, StateDeployWait: StateDeployFailed, StateDeleting: nodes.StateError,
}

// recover releases every lock held by the named conductor and moves
// nodes it was working on to their failed state with a last_error that
// says what happened.
func (c *Conductor) recover(ctx context.Context, owner, why string) (int, error) {
	held, err := c.db.Node.Query().Where(node.Reservation(owner)).All(ctx)
	if err != nil {
		return 0, err
	}
	for _, n := range held {
		if err := c.recoverNode(ctx, n, owner, why); err != nil {
			return 0, err
		}
	}
	return len(held), nil
}

// recoverNode releases one node's lock if owner still holds it, and
// records why.
func (c *Conductor) recoverNode(ctx context.Context, n *ent.Node, owner, why string) error {
	msg := fmt.Sprintf("Conductor %s was %s while this node was %s", owner, why, n.ProvisionState)
	if step := stepName(n.CleanStep, n.ServiceStep); step != "" {
		msg += " (step " + step + ")"
	}
	upd := c.db.Node.Update().Where(node.ID(n.ID), node.Reservation(owner)).ClearReservation().ClearTargetPowerState()
	if to, ok := failedState[n.ProvisionState]; ok {
		upd.SetProvisionState(to).ClearTargetProvisionState().SetLastError(msg + "; run it again when ready.").
			SetProvisionUpdatedAt(time.Now()).SetCleanStep(map[string]any{}).SetServiceStep(map[string]any{})
	} else if n.TargetPowerState != nil {
		upd.SetLastError(msg + "; the power action may not have completed.")
	}
	if cnt, err := upd.Save(ctx); err != nil || cnt == 0 {
		return err
	}
	_ = history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Severity: history.Error, Type: "conductor", Message: msg, Conductor: c.cfg.Name})
	return nil
}

func stepName(ms ...map[string]any) string {
	for _, m := range ms {
		if s, _ := m["step"].(string); s != "" {
			i, _ := m["interface"].(string)
			return i + "." + s
		}
	}
	return ""
}

// lock takes a node's reservation with one conditional UPDATE. A node
// another operation holds is waited for as Ironic waits
// (store.RetryLocked), then refused with Ironic's NodeLocked.
func (c *Conductor) lock(ctx context.Context, id int) error {
	return store.RetryLocked(ctx, func() error {
		n, err := c.db.Node.Update().Where(node.ID(id), node.ReservationIsNil()).SetReservation(c.cfg.Name).Save(ctx)
		if err != nil || n > 0 {
			return err
		}
		cur, err := c.db.Node.Get(ctx, id)
		if err != nil {
			return err
		}
		return lockedErr(cur)
	})
}

// unlock releases a lock this conductor holds, detached from the caller's
// cancellation and waiting out a database restart: a lock must never
// outlive the work.
func (c *Conductor) unlock(id int) {
	err := c.durably(context.Background(), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.db.Node.Update().Where(node.ID(id), node.Reservation(c.cfg.Name)).ClearReservation().Exec(ctx)
	})
	if err != nil {
		c.log.Error("releasing node lock", "node", id, "err", err)
	}
}

func (c *Conductor) client(n *ent.Node) (bmc.Client, error) {
	return bmc.Open(n.Driver, n.UUID, n.DriverInfo, c.cfg.BMC)
}

// SyncPower reads the power state of every eligible node the hash ring
// maps to this conductor, with bounded concurrency, and records changes.
// The ring is built afresh each cycle, so every replica agrees on who
// reads which node and a lost conductor's nodes are read by the others
// once its heartbeat times out. Nodes in maintenance, locked or with a
// power action in flight are left alone, and a change is recorded only if
// the stored state is still the one read before the BMC was asked, so an
// action Anvil finished meanwhile (or a replica with a staler ring) is
// never reported as external. It returns how many nodes it read.
func (c *Conductor) SyncPower(ctx context.Context) (int, error) {
	rings, err := c.loadRings(ctx)
	if err != nil {
		return 0, err
	}
	sem := make(chan struct{}, c.cfg.PowerSyncWorkers)
	var wg sync.WaitGroup
	defer wg.Wait()
	read := 0
	// A page at a time, so that a sync holds a page of nodes rather than
	// the group's whole fleet (10,000 nodes were some 14 MB of live heap
	// in every replica each cycle, which Go's GC target then multiplied).
	for after := 0; ctx.Err() == nil; {
		page, err := c.db.Node.Query().Where(node.IDGT(after), node.Maintenance(false), node.ReservationIsNil(), node.TargetPowerStateIsNil(), node.ConductorGroup(c.cfg.Group)).
			Order(ent.Asc(node.FieldID)).Limit(powerSyncPage).
			Select(node.FieldID, node.FieldUUID, node.FieldDriver, node.FieldDriverInfo, node.FieldPowerState).All(ctx)
		if err != nil {
			return read, err
		}
		for _, n := range page {
			if ctx.Err() != nil {
				break
			}
			if rings.Owner(n.UUID, c.cfg.Group) != c.cfg.Name {
				continue
			}
			read++
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				st, err := c.readPower(ctx, n)
				c.noteBMC(ctx, n, err)
				if err != nil {
					if ctx.Err() == nil {
						c.log.Warn("power sync: reading power state failed", "node", n.UUID, "err", err)
					}
					return
				}
				c.notePower(ctx, n, st, "power sync")
			}()
		}
		if len(page) < powerSyncPage {
			break
		}
		after = page[len(page)-1].ID
	}
	return read, nil
}

// powerSyncPage is how many nodes a power sync reads from the database at
// once.
const powerSyncPage = 256

// notePower records a power state read from n's BMC outside any action
// (by who: power sync, or an operator's "Test connection"): only if it
// differs from the stored one and no action holds or is changing the
// node, so a read never overwrites what an action is doing.
func (c *Conductor) notePower(ctx context.Context, n *ent.Node, st, who string) {
	if n.PowerState != nil && *n.PowerState == st {
		return
	}
	same := node.PowerStateIsNil()
	prev := "unknown"
	if n.PowerState != nil {
		same, prev = node.PowerState(*n.PowerState), *n.PowerState
	}
	cnt, err := c.db.Node.Update().Where(node.ID(n.ID), node.ReservationIsNil(), node.TargetPowerStateIsNil(), same).SetPowerState(st).Save(ctx)
	if err != nil || cnt != 1 {
		return
	}
	msg := fmt.Sprintf("Power state changed from %s to %s outside Anvil (%s)", prev, st, who)
	if n.PowerState == nil {
		msg = "Power state is " + st + " (first read by " + who + ")"
	}
	_ = history.Record(ctx, c.db.Client, history.Event{NodeID: n.ID, Type: "power", Message: msg, Conductor: c.cfg.Name})
}

func (c *Conductor) readPower(ctx context.Context, n *ent.Node) (string, error) {
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	return cl.PowerState(ctx)
}

// Info describes a conductor for the API.
type Info struct {
	Hostname, Group        string
	Alive                  bool
	Drivers                []string
	StartedAt, HeartbeatAt time.Time
	// Nodes is how many nodes the hash ring maps to the conductor now.
	Nodes int
}

// List returns every conductor that ever registered, alive or not, by
// hostname.
func (c *Conductor) List(ctx context.Context) ([]Info, error) {
	cs, err := c.db.Conductor.Query().Order(ent.Asc(conductor.FieldHostname)).All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Info, len(cs))
	for i, x := range cs {
		out[i] = c.info(x)
	}
	return out, nil
}

// conductorSortKeys are the columns Ironic's conductor list sorts by: its
// table's columns (created_at is the registration, updated_at the
// heartbeat). alive is computed and drivers a JSON list, so neither sorts,
// as in Ironic.
var conductorSortKeys = map[string]listing.Key{
	"id": {Col: conductor.FieldID}, "hostname": {Col: conductor.FieldHostname},
	"conductor_group": {Col: conductor.FieldConductorGroup}, "online": {Col: conductor.FieldOnline},
	"created_at": {Col: conductor.FieldStartedAt}, "updated_at": {Col: conductor.FieldHeartbeatAt},
}

func conductorSortValue(x *ent.Conductor, col string) any {
	switch col {
	case conductor.FieldHostname:
		return x.Hostname
	case conductor.FieldConductorGroup:
		return x.ConductorGroup
	case conductor.FieldOnline:
		return x.Online
	case conductor.FieldStartedAt:
		return x.StartedAt
	case conductor.FieldHeartbeatAt:
		return x.HeartbeatAt
	}
	return x.ID
}

// Page returns one page of the conductors, in registration order unless
// sorted otherwise, and whether more follow. The marker is a hostname, as
// in Ironic, and an unknown one is Ironic's 404. With share, each
// conductor's Nodes is its share of the nodes under the current ring:
// that reads every node, so only a caller showing it asks.
func (c *Conductor) Page(ctx context.Context, o listing.Options, share bool) ([]Info, bool, error) {
	plan, err := listing.Check(o, conductorSortKeys)
	if err != nil {
		return nil, false, err
	}
	q := c.db.Conductor.Query()
	if o.Marker != "" {
		m, err := c.db.Conductor.Query().Where(conductor.Hostname(o.Marker)).Only(ctx)
		if ent.IsNotFound(err) {
			return nil, false, errs.NotFound("Conductor %s could not be found.", o.Marker)
		}
		if err != nil {
			return nil, false, err
		}
		q = q.Where(plan.After(conductorSortValue(m, plan.Key.Col), m.ID))
	}
	cs, err := q.Order(plan.Order).Limit(plan.Limit + 1).All(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(cs) > plan.Limit
	if more {
		cs = cs[:plan.Limit]
	}
	counts := map[string]int{}
	if share {
		if counts, err = c.shares(ctx); err != nil {
			return nil, false, err
		}
	}
	out := make([]Info, len(cs))
	for i, x := range cs {
		out[i] = c.info(x)
		out[i].Nodes = counts[x.Hostname]
	}
	return out, more, nil
}

// shares counts the nodes the current ring maps to each conductor.
func (c *Conductor) shares(ctx context.Context) (map[string]int, error) {
	rings, err := c.loadRings(ctx)
	if err != nil {
		return nil, err
	}
	// Row by row rather than through ent's Scan, which built a struct per
	// node by reflection: 4 MB a request at 10,000 nodes, for two columns
	// read once each.
	rows, err := c.db.SQL.QueryContext(ctx, "SELECT "+node.FieldUUID+", "+node.FieldConductorGroup+" FROM "+node.Table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	share := map[string]int{}
	var uuid, group sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&uuid, &group); err != nil {
			return nil, err
		}
		share[rings.Owner(string(uuid), string(group))]++
	}
	return share, rows.Err()
}

// Get returns the conductor named hostname; 404 when none ever registered.
func (c *Conductor) Get(ctx context.Context, hostname string) (Info, error) {
	x, err := c.db.Conductor.Query().Where(conductor.Hostname(hostname)).Only(ctx)
	if ent.IsNotFound(err) {
		return Info{}, errs.NotFound("Conductor %s could not be found.", hostname)
	}
	if err != nil {
		return Info{}, err
	}
	return c.info(x), nil
}

func (c *Conductor) info(x *ent.Conductor) Info {
	alive := x.Online && time.Since(x.HeartbeatAt) < c.cfg.HeartbeatTimeout
	return Info{Hostname: x.Hostname, Group: x.ConductorGroup, Alive: alive, Drivers: x.Drivers, StartedAt: x.StartedAt, HeartbeatAt: x.HeartbeatAt}
}
