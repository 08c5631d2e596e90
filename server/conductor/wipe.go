package conductor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/agent"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/inbox"
	"github.com/anvilproject/anvil/server/nodes"
)

// Wipe policies: how deep automated cleaning between tenants erases a
// machine's disks (docs/wipe.md).
const (
	// WipeMetadata removes partition tables and filesystem signatures
	// only (the agent's erase_devices_metadata): data bytes stay.
	WipeMetadata = "metadata"
	// WipeExpress erases each disk the fastest way that leaves none of
	// its data: NVMe disks by the agent's erase_devices_express (NVMe
	// format), every other disk by erase_devices (ATA secure erase where
	// the disk supports it, else a full overwrite).
	WipeExpress = "express"
	// WipeFull overwrites every byte of every disk (erase_devices with
	// the hardware erases turned off), whatever the disk offers.
	WipeFull = "full"
	// WipeNone is a record's policy when nothing was wiped.
	WipeNone = "none"
)

// WipePolicies are the policies an operator may choose.
var WipePolicies = nodes.WipePolicies

// WipeKey is the driver_info key of a node's own wipe policy, which
// only system scope may set (nodes.checkWipe).
const WipeKey = nodes.WipeKey

// A wipe record's result.
const (
	WipeWiped    = "wiped"
	WipeFailed   = "failed"
	WipeNotWiped = "not wiped"
)

// Per-disk methods, as a record names them.
const (
	methodMetadata  = "metadata: partition tables and filesystem signatures removed (erase_devices_metadata)"
	methodNVMe      = "NVMe secure erase (erase_devices_express)"
	methodSecureOrW = "ATA secure erase where the disk supports it, else a full overwrite (erase_devices)"
	methodNone      = "not erased"
)

// WipePolicy is the policy that applies to n: its driver_info/anvil_wipe
// when valid, else the server's --wipe.
func (c *Conductor) WipePolicy(n *ent.Node) string {
	if p, _ := n.DriverInfo[WipeKey].(string); slices.Contains(WipePolicies, p) {
		return p
	}
	if slices.Contains(WipePolicies, c.cfg.Agent.Wipe) {
		return c.cfg.Agent.Wipe
	}
	return WipeExpress
}

// WipePromise says what automated cleaning does to n's disks, as a
// tenant reads it before releasing the node: it never says wiped for a
// node that is not.
func (c *Conductor) WipePromise(n *ent.Node) string {
	if why := noWipe(n); why != "" {
		return "Its disks are not wiped: " + strings.TrimSuffix(strings.TrimPrefix(why, "none ("), ")") + "."
	}
	switch c.WipePolicy(n) {
	case WipeMetadata:
		return "Only its disks' partition tables and signatures are erased (wipe policy metadata): the data on them stays."
	case WipeFull:
		return "Every byte of its disks is overwritten (wipe policy full)."
	}
	return "Its disks are wiped (wipe policy express: NVMe format or ATA secure erase where the disk has it, else every byte overwritten)."
}

// wipeSteps are the agent's steps of a policy, in the order they run.
func wipeSteps(policy string) []Step {
	switch policy {
	case WipeMetadata:
		return []Step{{Interface: "deploy", Step: "erase_devices_metadata"}}
	case WipeFull:
		return []Step{{Interface: "deploy", Step: "erase_devices"}}
	}
	return []Step{{Interface: "deploy", Step: "erase_devices_express"}, {Interface: "deploy", Step: "erase_devices"}}
}

// Wipes says whether automated cleaning wipes n's disks at all, for
// labels that promise it.
func Wipes(n *ent.Node) bool { return noWipe(n) == "" }

// noWipe says why automated cleaning does not wipe n at all, or "" when
// it does: automated_clean false is Ironic's opt-out, and a fake-hardware
// node has no machine and so no disks.
func noWipe(n *ent.Node) string {
	switch {
	case n.AutomatedClean != nil && !*n.AutomatedClean:
		return "none (automated_clean is false)"
	case bmc.Canonical(n.Driver) == "fake-hardware":
		return "none (fake hardware: no machine, no disks)"
	}
	return ""
}

// wipeRun follows one automated cleaning from its start to its record.
type wipeRun struct {
	policy     string
	started    time.Time
	owner      *string
	lessee     *string
	alloc      *string
	allocOwner *string
	// disks as the agent's inventory lists them: name, size, serial,
	// model, and the method each erase step left.
	disks    []map[string]any
	agentLog string
}

type wipeRuns struct {
	mu  sync.Mutex
	run map[int]*wipeRun
}

// begin starts following n's wipe, unless one is already followed (the
// tear down began it with the allocation it released).
func (w *wipeRuns) begin(n *ent.Node, policy string, alloc, allocOwner *string) *wipeRun {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.run[n.ID]; r != nil {
		return r
	}
	if w.run == nil {
		w.run = map[int]*wipeRun{}
	}
	r := &wipeRun{policy: policy, started: time.Now(), owner: optional(n.Owner), lessee: optional(n.Lessee), alloc: alloc, allocOwner: allocOwner}
	w.run[n.ID] = r
	return r
}

// optional is s, or nil when empty: a node without owner or lessee.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (w *wipeRuns) get(id int) *wipeRun {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.run[id]
}

func (w *wipeRuns) take(id int) *wipeRun {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.run[id]
	delete(w.run, id)
	return r
}

// setLog names the agent's logs kept for n's wipe, if one is followed.
func (w *wipeRuns) setLog(id int, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.run[id]; r != nil && name != "" {
		r.agentLog = name
	}
}

func isErase(step string) bool {
	return step == "erase_devices" || step == "erase_devices_express" || step == "erase_devices_metadata"
}

// readDisks asks the agent for its inventory (poll.get_hardware_info)
// once per wipe: the disks the record names.
func (w *wipeRun) readDisks(ctx context.Context, cl *agent.Client) error {
	if w.disks != nil {
		return nil
	}
	cmd, err := cl.Command(ctx, "poll.get_hardware_info", nil, true)
	if err != nil {
		return fmt.Errorf("reading the disks to wipe from the agent's inventory: %w", err)
	}
	var inv struct {
		Disks []map[string]any `json:"disks"`
	}
	if err := json.Unmarshal(cmd.Result, &inv); err != nil {
		return fmt.Errorf("reading the disks to wipe from the agent's inventory: %w", err)
	}
	w.disks = []map[string]any{}
	for _, d := range inv.Disks {
		disk := map[string]any{"method": methodNone}
		for _, k := range []string{"name", "size", "serial", "model"} {
			if v, ok := d[k]; ok && v != nil {
				disk[k] = v
			}
		}
		w.disks = append(w.disks, disk)
	}
	return nil
}

func isNVMe(d map[string]any) bool {
	name, _ := d["name"].(string)
	return strings.HasPrefix(name, "/dev/nvme")
}

// prepare sets, in nm (the node as the step is sent), the agent's erase
// options for this policy, as Ironic sends its [deploy] erase options in
// driver_internal_info: a secure erase that fails fails the step (never
// a silent fall-back to something shallower); full turns the hardware
// erases off so every byte is overwritten; express's erase_devices skips
// the NVMe disks erase_devices_express already erased. It reports false
// when the step has no disk left to erase.
func (w *wipeRun) prepare(st Step, nm map[string]any, passes int) bool {
	internal, _ := nm["driver_internal_info"].(map[string]any)
	internal["agent_continue_if_secure_erase_failed"] = false
	internal["agent_continue_if_ata_erase_failed"] = false
	internal["agent_erase_devices_iterations"] = passes
	internal["agent_erase_devices_zeroize"] = true
	hw := w.policy != WipeFull
	internal["agent_enable_nvme_secure_erase"] = hw
	internal["agent_enable_ata_secure_erase"] = hw
	if w.policy != WipeExpress || st.Step != "erase_devices" {
		return true
	}
	var skip []any
	for _, d := range w.disks {
		if isNVMe(d) {
			skip = append(skip, map[string]any{"name": d["name"]})
		}
	}
	if len(skip) == 0 {
		return true
	}
	if len(skip) == len(w.disks) {
		return false
	}
	props := map[string]any{}
	if p, _ := nm["properties"].(map[string]any); p != nil {
		for k, v := range p {
			props[k] = v
		}
	}
	props["skip_block_devices"] = skip
	nm["properties"] = props
	return true
}

// done notes the method each disk got from a step that succeeded.
// erase_devices answers with the disks it erased; the others erase
// every disk the agent lists or fail.
func (w *wipeRun) done(st Step, cmd *agent.Command, passes int) {
	var erased map[string]any
	if st.Step == "erase_devices" && cmd != nil {
		var res struct {
			Result map[string]any `json:"clean_result"`
		}
		if json.Unmarshal(cmd.Result, &res) == nil {
			erased = res.Result
		}
	}
	for _, d := range w.disks {
		name, _ := d["name"].(string)
		switch st.Step {
		case "erase_devices_metadata":
			d["method"] = methodMetadata
		case "erase_devices_express":
			d["method"] = methodMetadata
			if isNVMe(d) {
				d["method"] = methodNVMe
			}
		case "erase_devices":
			if _, ok := erased[name]; !ok {
				continue
			}
			d["method"] = methodSecureOrW
			if w.policy == WipeFull {
				d["method"] = fmt.Sprintf("full overwrite: %d random pass(es), then zeros (erase_devices, shred)", passes)
			}
		}
	}
}

// wipeStep runs before an erase step of an automated cleaning's wipe:
// it reads the disks and sets the agent's erase options. skip says the
// step has no disk to erase.
func (c *Conductor) wipeStep(ctx context.Context, n *ent.Node, r *agentRun, st Step, nm map[string]any) (w *wipeRun, skip bool, err error) {
	w = c.wipes.get(n.ID)
	if w == nil || st.Interface != "deploy" || !isErase(st.Step) {
		return nil, false, nil
	}
	if err := w.readDisks(ctx, r.cl); err != nil {
		return nil, false, err
	}
	return w, !w.prepare(st, nm, c.cfg.Agent.WipePasses), nil
}

// endWipe writes the record of n's wipe when its automated cleaning
// ends, and a history event with its summary. failure is the run's
// last_error, "" when it succeeded.
func (c *Conductor) endWipe(ctx context.Context, n *ent.Node, failure string) {
	w := c.wipes.take(n.ID)
	if w == nil {
		return
	}
	result, msg := WipeWiped, ""
	policy := w.policy
	if failure != "" {
		result, msg = WipeFailed, failure
	}
	if why := noWipe(n); why != "" {
		policy, result, msg = WipeNone, WipeNotWiped, why
	}
	if w.disks == nil {
		w.disks = []map[string]any{}
	}
	if err := c.recordWipe(ctx, c.db.Client, n, w, policy, result, msg); err != nil {
		c.log.Error("recording a wipe", "node", n.UUID, "err", err)
	}
}

// recordWipe inserts a wipe record and its history event through db
// (a transaction's client, or the store's).
func (c *Conductor) recordWipe(ctx context.Context, db *ent.Client, n *ent.Node, w *wipeRun, policy, result, msg string) error {
	id := uuid.NewString()
	now := time.Now()
	err := db.WipeRecord.Create().SetUUID(id).SetNodeUUID(n.UUID).SetNillableNodeName(n.Name).
		SetNillableOwner(w.owner).SetNillableLessee(w.lessee).SetNillableAllocation(w.alloc).SetNillableAllocationOwner(w.allocOwner).
		SetPolicy(policy).SetResult(result).SetMessage(msg).SetDisks(w.disks).SetAgentLog(w.agentLog).
		SetConductor(c.cfg.Name).SetStartedAt(w.started).SetFinishedAt(now).Exec(ctx)
	if err != nil {
		return err
	}
	sev := history.Info
	if result != WipeWiped {
		sev = history.Warning
	}
	summary := WipeSummary(policy, result, msg, w.disks, now.Sub(w.started))
	if err := history.Record(ctx, db, history.Event{NodeID: n.ID, Severity: sev, Type: "wipe", Conductor: c.cfg.Name,
		Message: summary + "; record " + id}); err != nil {
		return err
	}
	return c.tellWipe(ctx, db, n, w, id, result, summary)
}

// tellWipe tells the tenant whose data was on n (its lessee, or the
// project whose allocation held it) and its owner that the wipe between
// tenants was recorded, and how it went. A node no tenant had is not
// news.
func (c *Conductor) tellWipe(ctx context.Context, db *ent.Client, n *ent.Node, w *wipeRun, id, result, summary string) error {
	tenant := w.lessee
	if tenant == nil {
		tenant = w.allocOwner
	}
	if c.inbox == nil || tenant == nil || *tenant == "" {
		return nil
	}
	label := inbox.NodeLabel(n.Name, n.UUID)
	subject := map[string]string{WipeWiped: "Node %s was wiped", WipeFailed: "Node %s's wipe failed", WipeNotWiped: "Node %s was not wiped"}[result]
	if subject == "" {
		subject = "Node %s's wipe: " + result
	}
	ns := []inbox.Notice{{Project: *tenant, Kind: inbox.NodeWiped, Key: "wiped:" + id, Node: n.UUID,
		Subject: fmt.Sprintf(subject, label) + " after your use", Body: summary + ". Wipe record " + id + "."}}
	if w.owner != nil && *w.owner != "" && *w.owner != *tenant {
		ns = append(ns, inbox.Notice{Project: *w.owner, Kind: inbox.NodeWiped, Key: "wiped:" + id, Node: n.UUID,
			Subject: fmt.Sprintf(subject, label) + " after project " + *tenant, Body: summary + ". Wipe record " + id + "."})
	}
	return c.inbox.Send(ctx, db, ns...)
}

// WipeSummary is a wipe record in one sentence, as the node's history
// and the portal say it.
func WipeSummary(policy, result, msg string, disks []map[string]any, took time.Duration) string {
	if policy == WipeNone {
		return "Not wiped: " + msg
	}
	var parts []string
	for _, d := range disks {
		name, _ := d["name"].(string)
		method, _ := d["method"].(string)
		parts = append(parts, name+": "+method)
	}
	s := fmt.Sprintf("Wipe (%s policy) %s in %s", policy, result, took.Round(time.Second))
	if len(parts) > 0 {
		s += "; " + strings.Join(parts, "; ")
	}
	if msg != "" {
		s += "; " + msg
	}
	return s
}
