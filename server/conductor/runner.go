package conductor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// phase holds the state names of a run of steps: cleaning, servicing or
// deploying. kind names its events and its step fields.
type phase struct {
	kind, running, wait, hold, failed, done string
}

var phases = map[string]phase{
	"clean":   {"clean", nodes.StateCleaning, nodes.StateCleanWait, StateCleanHold, nodes.StateCleanFailed, nodes.StateManageable},
	"service": {"service", nodes.StateServicing, nodes.StateServiceWait, StateServiceHold, nodes.StateServiceFailed, nodes.StateActive},
	"deploy":  {"deploy", StateDeploying, StateDeployWait, StateDeployHold, StateDeployFailed, nodes.StateActive},
	// Cleaning after a tear down ends in available, as Ironic's does.
	"automated clean": {"clean", nodes.StateCleaning, nodes.StateCleanWait, StateCleanHold, nodes.StateCleanFailed, nodes.StateAvailable},
}

var (
	errHold     = errors.New("hold")
	errAborted  = errors.New("aborted")
	errShutdown = errors.New("conductor shutting down")
)

// abortPoll is how often a waiting step looks for an abort.
const abortPoll = 200 * time.Millisecond

// runSteps runs steps in order on a node this conductor has locked, as
// the claim left it, and releases the lock when it ends. Every step's
// start, end and failure is a node event; clean_step or service_step
// shows the current one.
//
// Writes are few and shared: the end of a step rides in the same commit
// as the start of the next (or the final state, a hold or a failure), and
// that commit is grouped with other nodes' (see committer). A step's end
// is still durable before the next step runs, so a crash never loses a
// step that ran without also losing the start of the one after it. Each
// write is fenced by this conductor's lock, and the start of a step also
// by the abort flag, so no read precedes it; the starts of a batch's
// nodes, and the ends of their successful runs, share one UPDATE
// (writeSteps); the last write releases the lock. run names the phase (clean, service, deploy,
// automated clean); its kind names the events and step fields. started
// says the claim already recorded the start of the first step (see
// firstStep), so the run begins by executing it.
func (c *Conductor) runSteps(n *ent.Node, run string, steps []Step, who string, started bool) {
	ctx := context.WithoutCancel(c.ctx)
	id := n.ID
	ph := phases[run]
	kind := ph.kind
	// carry holds what waits for the next commit: the end of the step
	// that just ran and the power state it left.
	var carry struct {
		power  string
		events []history.Event
	}
	// commit writes one UPDATE of the node and its events with whatever
	// carry holds. A database that cannot be reached (a restart, a
	// failover) is waited for, so a run is not failed for it; a write
	// that fails otherwise leaves carry for the failure record to take.
	commit := func(set func(u *ent.NodeUpdate), step map[string]any) error {
		power := carry.power
		upd := func(tx *ent.Client) error {
			u := tx.Node.Update().Where(node.ID(id), node.Reservation(c.cfg.Name))
			set(u)
			if power != "" {
				u.SetPowerState(power)
			}
			if step != nil {
				setStep(u, kind, step)
			}
			cnt, err := u.Save(ctx)
			if err == nil && cnt == 0 {
				return errFenced
			}
			return err
		}
		err := c.durably(ctx, func() error {
			return c.commits.do(ctx, c.db, write{updates: []func(tx *ent.Client) error{upd}, events: carry.events})
		})
		if err == nil {
			carry.power, carry.events = "", nil
		}
		return err
	}
	// record writes a step's start, or the run's successful end, with
	// whatever carry holds, as a stepWrite.
	record := func(sw stepWrite) error {
		sw.id, sw.holder, sw.kind, sw.power = id, c.cfg.Name, kind, carry.power
		w := write{step: &sw, events: carry.events}
		err := c.durably(ctx, func() error { return c.commits.do(ctx, c.db, w) })
		if err == nil {
			carry.power, carry.events = "", nil
		}
		return err
	}
	event := func(sev, msg string) history.Event { return c.stepEvent(id, kind, who, sev, msg) }
	// An automated cleaning between tenants is a wipe, which ends with
	// its record (wipe.go).
	wipe := run == "automated clean"
	if wipe {
		c.wipes.begin(n, c.WipePolicy(n), nil, nil)
	}
	// settle answers the run's last write: if it could not release the
	// lock, the lock is released alone, so it never outlives the run.
	settle := func(err error) {
		switch {
		case errors.Is(err, errFenced):
			c.log.Warn("node lock lost during steps; another conductor recovered it", "node", id)
		case err != nil:
			c.log.Error("recording the end of steps", "node", id, "err", err)
			c.unlock(id)
		}
	}
	// end writes the run's last state and releases the lock with it.
	end := func(set func(u *ent.NodeUpdate), ev history.Event) {
		carry.events = append(carry.events, ev)
		settle(commit(func(u *ent.NodeUpdate) { set(u); u.ClearReservation() }, map[string]any{}))
	}
	// failWith records msg as last_error and as the event; ev, when
	// not nil, is the event instead (a BMC failure's, whose detail only
	// system-scope readers see). inStep says a step itself failed.
	failWith := func(msg string, ev *history.Event, inStep bool) {
		e := event(history.Error, msg)
		if ev != nil {
			e = *ev
		}
		// A run that booted the agent keeps its logs and powers the
		// machine off. A clean or service step that fails, in the agent
		// or through the BMC, leaves the machine half-configured: the
		// node goes into maintenance with a fault, as Ironic's
		// cleaning_error_handler and servicing_error_handler do when a
		// step was running, so it goes to no tenant until someone looks
		// (or the tenant recovers a retryable runbook's run: Recover).
		// An abort, a conductor shutdown or a run refused before its
		// first step says nothing about the machine and sets neither.
		inBand := c.endAgent(ctx, n, ph, msg)
		if wipe {
			// Before the final state: whoever sees the cleaning end
			// finds its wipe record.
			c.endWipe(ctx, n, msg)
		}
		fault := map[string]string{"clean": FaultClean, "service": FaultService}[kind]
		end(func(u *ent.NodeUpdate) {
			u.SetProvisionState(ph.failed).ClearTargetProvisionState().SetLastError(msg).SetProvisionUpdatedAt(time.Now())
			if inStep && fault != "" {
				u.SetMaintenance(true).SetMaintenanceReason(msg).SetFault(fault)
			}
			if inBand && n.PowerState != nil {
				u.SetPowerState(*n.PowerState)
			}
		}, e)
	}
	fail := func(msg string) { failWith(msg, nil, false) }
	// An automated cleaning that cannot start is a wipe that cannot
	// happen: it fails closed, into maintenance with the clean failure
	// fault like a failed step, so the node goes to no tenant unwiped.
	// (Ironic fails such a cleaning without maintenance; here the wipe is
	// the tenant boundary, and maintenance is what keeps it.)
	failClosed := func(why string) {
		failWith(fmt.Sprintf("Automated cleaning cannot wipe node %s: %s It stays out of service until its disks can be wiped: fix that, clear maintenance and provide it again (or set automated_clean false to opt out).",
			n.UUID, why), nil, true)
	}
	if why := cannotRun(n, kind, steps); why != "" {
		if wipe {
			failClosed(why)
			return
		}
		fail(why)
		return
	}
	c.refreshCaches(ctx, n, kind)
	if name := firstInBand(n, steps); name != "" {
		if _, err := agentBoot(n, c.cfg.Agent.Media); err != nil {
			if wipe {
				failClosed(fmt.Sprintf("its step %s runs in the ramdisk agent, which it cannot boot: %v.", name, err))
				return
			}
			fail(fmt.Sprintf("Step %s runs in the ramdisk agent, which node %s cannot boot: %v.", name, n.UUID, err))
			return
		}
	}
	for i, st := range steps {
		if c.ctx.Err() != nil {
			fail(fmt.Sprintf("Conductor %s shut down before step %s; run the remaining steps again.", c.cfg.Name, st.Name()))
			return
		}
		if i > 0 || !started {
			n.DriverInternalInfo = stepProgress(n.DriverInternalInfo, kind, i, len(steps))
			info := n.DriverInternalInfo
			carry.events = append(carry.events, event(history.Info, stepStarted(st, i, len(steps))))
			// The abort flag is part of the UPDATE's condition, so an abort
			// committed before it is seen and one after it waits for the
			// next step: the flag is never overwritten unseen.
			err := record(stepWrite{state: ph.running, info: info, step: st.asMap()})
			if errors.Is(err, errFenced) {
				// Aborted, or the lock is gone (then the failure's own
				// fenced write does nothing).
				carry.events = carry.events[:len(carry.events)-1]
				fail(fmt.Sprintf("Aborted by request before step %s.", st.Name()))
				return
			}
			if err != nil {
				carry.events = carry.events[:len(carry.events)-1]
				fail(fmt.Sprintf("Could not record step %s: %v", st.Name(), err))
				return
			}
		}
		began := time.Now()
		power, err := c.execStep(ctx, n, ph, st)
		c.cfg.Metrics.observe(kind, st, time.Since(began), err)
		switch {
		case errors.Is(err, errHold):
			info := cloneInfo(n.DriverInternalInfo)
			info["pending_steps"] = stepsToAny(steps[i+1:])
			end(func(u *ent.NodeUpdate) {
				u.SetProvisionState(ph.hold).SetDriverInternalInfo(info).SetProvisionUpdatedAt(time.Now())
			}, event(history.Info, fmt.Sprintf("On hold after step %s; unhold to run the %d remaining steps, or abort", st.Name(), len(steps)-i-1)))
			return
		case errors.Is(err, errAborted):
			fail(fmt.Sprintf("Aborted by request during step %s.", st.Name()))
			return
		case errors.Is(err, errShutdown):
			fail(fmt.Sprintf("Conductor %s shut down during step %s; run the remaining steps again.", c.cfg.Name, st.Name()))
			return
		case err != nil:
			ev := event(history.Error, "")
			ev.Failed(fmt.Sprintf("Step %s failed: ", st.Name()), err)
			failWith(ev.Message, &ev, true)
			return
		}
		carry.power = power
		carry.events = append(carry.events, event(history.Info, fmt.Sprintf("Step %s done", st.Name())))
	}
	if c.endAgent(ctx, n, ph, "") && n.PowerState != nil {
		carry.power = *n.PowerState
	}
	c.refreshCaches(ctx, n, kind)
	info := cloneInfo(n.DriverInternalInfo)
	delete(info, "pending_steps")
	delete(info, abortRequestedField)
	delete(info, kind+"_step_index")
	delete(info, kind+"_step_total")
	// The final state and its event land together, so whoever sees the
	// node done also sees why.
	if wipe {
		// Before the node is available: the next tenant's view of it
		// already has the record of the wipe that made it so.
		c.endWipe(ctx, n, "")
	}
	done := fmt.Sprintf("All %d %s steps done; node is %s", len(steps), kind, ph.done)
	if len(steps) == 0 {
		// "All 0 steps done" reads as work that was done; the wipe
		// record, when there is one, says what happened to the disks.
		done = fmt.Sprintf("No %s steps to run; node is %s", kind, ph.done)
	}
	carry.events = append(carry.events, event(history.Info, done))
	settle(record(stepWrite{state: ph.done, info: info, step: map[string]any{}, end: true, at: time.Now()}))
}

// firstStep prepares a claim that starts a run of steps to record the
// start of the first one too, as runSteps would in its own write: a run
// of five steps then writes six times instead of seven, and on SQLite
// every write goes through the one writer. A run that cannot start (a
// step the driver does not run, ill-formed arguments) is left to
// runSteps, which fails it before any step starts. It returns info with the first step's progress, what the claim also sets,
// and the step's start event; ok is false when the claim starts nothing,
// and runSteps is then called with started false.
func (c *Conductor) firstStep(n *ent.Node, run string, steps []Step, who string, info map[string]any) (map[string]any, func(u *ent.NodeUpdate), []history.Event, bool) {
	ph, ok := phases[run]
	if !ok || len(steps) == 0 || cannotRun(n, ph.kind, steps) != "" {
		return info, func(*ent.NodeUpdate) {}, nil, false
	}
	info = stepProgress(info, ph.kind, 0, len(steps))
	set := func(u *ent.NodeUpdate) { setStep(u, ph.kind, steps[0].asMap()) }
	return info, set, []history.Event{c.stepEvent(n.ID, ph.kind, who, history.Info, stepStarted(steps[0], 0, len(steps)))}, true
}

// stepProgress is info with "step i of total": progress lives in
// driver_internal_info, as Ironic keeps its clean_step_index there, so
// it is known without reading history.
func stepProgress(info map[string]any, kind string, i, total int) map[string]any {
	info = cloneInfo(info)
	info[kind+"_step_index"] = i
	info[kind+"_step_total"] = total
	return info
}

func stepStarted(st Step, i, total int) string {
	return fmt.Sprintf("Step %s started (%d of %d)", st.Name(), i+1, total)
}

// setStep shows the current step in clean_step or service_step; a
// deploy's steps have no such field.
func setStep(u *ent.NodeUpdate, kind string, step map[string]any) {
	switch kind {
	case "clean":
		u.SetCleanStep(step)
	case "service":
		u.SetServiceStep(step)
	}
}

func (c *Conductor) stepEvent(id int, kind, who, sev, msg string) history.Event {
	return history.Event{NodeID: id, Severity: sev, Type: kind, Message: msg, User: who, Conductor: c.cfg.Name}
}

// errFenced rolls back a step write whose node is no longer this
// conductor's to work, or whose run was asked to abort.
var errFenced = errors.New("node lock lost or abort requested")

// retryFor bounds how long a write waits for the database to come back.
const retryFor = 2 * time.Minute

// durably runs fn until it succeeds, fails for a reason other than an
// unreachable database, or retryFor passes: a conductor outlives a
// database restart without leaving a node half-worked or locked.
func (c *Conductor) durably(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(retryFor)
	wait := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil || !store.Unreachable(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, 2*time.Second)
	}
}

// write is one node's changes and the events that explain them, which
// commit together.
type write struct {
	updates []func(tx *ent.Client) error
	// step, when set, is a step write that goes with the batch's others
	// in one statement (writeSteps); events are then recorded only if it
	// was not fenced.
	step   *stepWrite
	events []history.Event
	// audits are the rows that record the change, inserted with the
	// batch's others in one statement.
	audits []*ent.AuditEventCreate
}

// committer groups the step writes of many nodes into few transactions:
// each commit costs a disk sync (and on SQLite holds the only write
// lock), and the events of a whole batch go in one INSERT, so a thousand
// nodes cleaning at once commit together instead of one after another.
// A caller waits until its write is committed.
type committer struct {
	mu      sync.Mutex
	queue   []*pendingWrite
	running int
}

type pendingWrite struct {
	write
	done chan error
}

const (
	// maxBatch bounds a grouped transaction, so it stays short.
	maxBatch = 128
	// pgDrains is how many batches commit at once on PostgreSQL, whose
	// round trips overlap; SQLite has one writer, so one batch at a time.
	// Two beat one, three, four and eight on BenchmarkCleaning: more
	// drains make smaller batches, and so more statements for the same
	// writes.
	pgDrains = 2
)

// do commits w, grouped with whatever else is waiting.
func (g *committer) do(ctx context.Context, db *store.DB, w write) error {
	// A batch carries other callers' writes, so each event takes its
	// acting project from its own caller, and the batch runs with none.
	if pr := policies.PrincipalFrom(ctx); pr != nil && pr.Project != "" {
		evs := make([]history.Event, len(w.events))
		for i, e := range w.events {
			if e.Project == "" {
				e.Project = pr.Project
			}
			evs[i] = e
		}
		w.events = evs
	}
	p := &pendingWrite{write: w, done: make(chan error, 1)}
	limit := 1
	if db.Dialect == dialect.Postgres {
		limit = pgDrains
	}
	g.mu.Lock()
	g.queue = append(g.queue, p)
	if g.running < limit {
		g.running++
		// The batch is others' too: one caller's cancellation or
		// principal must not reach it.
		go g.drain(context.Background(), db)
	}
	g.mu.Unlock()
	return <-p.done
}

// drain commits what is queued, batch after batch, until nothing waits.
func (g *committer) drain(ctx context.Context, db *store.DB) {
	for {
		g.mu.Lock()
		if len(g.queue) == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		batch := g.queue[:min(len(g.queue), maxBatch)]
		g.queue = g.queue[len(batch):]
		g.mu.Unlock()
		fenced, err := commitBatch(ctx, db, batch)
		if err == nil || len(batch) == 1 {
			for _, p := range batch {
				p.done <- orFenced(err, fenced[p])
			}
			continue
		}
		// One failed write must not fail its neighbours: each alone.
		for _, p := range batch {
			fenced, err := commitBatch(ctx, db, []*pendingWrite{p})
			p.done <- orFenced(err, fenced[p])
		}
	}
}

func orFenced(err error, fenced bool) error {
	if err == nil && fenced {
		return errFenced
	}
	return err
}

// commitBatch commits a batch in one transaction and reports the step
// writes that were fenced; their events are not recorded.
func commitBatch(ctx context.Context, db *store.DB, batch []*pendingWrite) (map[*pendingWrite]bool, error) {
	var fenced map[*pendingWrite]bool
	err := store.WithTx(ctx, db, func(tx *ent.Client) error {
		fenced = nil
		var (
			events []history.Event
			steps  []*stepWrite
			audits []*ent.AuditEventCreate
		)
		for _, p := range batch {
			for _, fn := range p.updates {
				if err := fn(tx); err != nil {
					return err
				}
			}
			audits = append(audits, p.audits...)
			if p.step != nil {
				steps = append(steps, p.step)
				continue
			}
			events = append(events, p.events...)
		}
		if len(steps) > 0 {
			done, err := writeSteps(ctx, tx, db.Dialect, steps)
			if err != nil {
				return err
			}
			for _, p := range batch {
				switch {
				case p.step == nil:
				case done[p.step.id]:
					events = append(events, p.events...)
				default:
					if fenced == nil {
						fenced = map[*pendingWrite]bool{}
					}
					fenced[p] = true
				}
			}
		}
		if len(audits) > 0 {
			if err := tx.AuditEvent.CreateBulk(audits...).Exec(ctx); err != nil {
				return err
			}
		}
		return history.RecordAll(ctx, tx, events)
	})
	return fenced, err
}

func (c *Conductor) abortRequested(ctx context.Context, id int) bool {
	n, err := c.db.Node.Get(ctx, id)
	return err == nil && n.DriverInternalInfo[abortRequestedField] == true
}

// execStep runs one step and returns the power state it left, if it
// changed power. A BMC call always completes; only waiting is cut short
// by an abort or a shutdown.
func (c *Conductor) execStep(ctx context.Context, n *ent.Node, ph phase, st Step) (string, error) {
	st.Interface, st.Step = canonical(st.Interface, st.Step)
	switch st.Name() {
	case "deploy.deploy":
		return c.deployImage(ctx, n, ph)
	case "deploy.hold":
		return "", errHold
	}
	if inBandOn(n, st.Interface, st.Step) {
		return "", c.inBandStep(ctx, n, ph, st)
	}
	if fn := agentDeploySteps[st.Name()]; fn != nil {
		return fn(c, ctx, n, ph)
	}
	switch st.Name() {
	case "deploy.wait":
		secs, _ := st.Args["seconds"].(float64)
		// Both state writes wait out a database restart: the wait itself
		// needs no database, so an outage must not fail it.
		setState := func(state string) error {
			return c.durably(ctx, func() error {
				return c.db.Node.Update().Where(node.ID(n.ID), node.Reservation(c.cfg.Name)).SetProvisionState(state).Exec(ctx)
			})
		}
		if err := setState(ph.wait); err != nil {
			return "", err
		}
		deadline := time.Now().Add(time.Duration(secs) * time.Second)
		t := time.NewTicker(abortPoll)
		defer t.Stop()
		for time.Now().Before(deadline) {
			select {
			case <-c.ctx.Done():
				return "", errShutdown
			case <-t.C:
				if c.abortRequested(ctx, n.ID) {
					return "", errAborted
				}
			}
		}
		return "", setState(ph.running)
	}
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	// A BMC that does not answer is tried again; the node's page shows the
	// try under way from this record, which goes when the step ends.
	retried := false
	record := func(r any) {
		if err := c.setInternal(context.WithoutCancel(ctx), c.db.Client, n.ID, c.cfg.Name, InternalBMCRetry, r); err != nil {
			c.log.Warn("record a BMC retry", "node", n.UUID, "err", err)
		}
	}
	ctx = bmc.OnRetry(ctx, func(try, of int, timeout time.Duration) {
		retried = true
		record(BMCRetry{Step: st.Name(), Try: try, Of: of, Timeout: timeout.Seconds(), At: time.Now().UTC()})
	})
	defer func() {
		if retried {
			record(nil)
		}
	}()
	switch st.Name() {
	case "power.power_on", "power.power_off", "power.reboot":
		target := map[string]string{"power.power_on": bmc.PowerOn, "power.power_off": bmc.PowerOff, "power.reboot": bmc.Rebooting}[st.Name()]
		if err := powerOffAllowed(n, target); err != nil {
			return "", err
		}
		final, err := bmc.Power(ctx, cl, target, c.cfg.PowerTimeout, c.cfg.BMC.PowerPoll)
		c.noteBMC(ctx, n, err)
		return final, err
	case "management.set_boot_device":
		dev, _ := st.Args["device"].(string)
		persistent, _ := st.Args["persistent"].(bool)
		err := cl.SetBootDevice(ctx, dev, persistent, BootMode(n))
		c.noteBMC(ctx, n, err)
		return "", err
	case "management.reset_bmc":
		err := cl.ResetBMC(ctx)
		c.noteBMC(ctx, n, err)
		if err == nil {
			// The next step needs the BMC back.
			err = bmc.AwaitBMC(ctx, cl, c.cfg.BMCResetTimeout, max(c.cfg.BMC.PowerPoll, time.Second))
		}
		return "", err
	}
	return c.execHardwareStep(ctx, n, cl, st)
}
