package conductor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"entgo.io/ent/dialect"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
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

// runSteps runs steps in order on a node this conductor has locked; the
// caller releases the lock. Every step's start, end and failure is a
// node event; clean_step or service_step shows the current one.
//
// Writes are few and shared: the end of a step rides in the same commit
// as the start of the next (or the final state, a hold or a failure), and
// that commit is grouped with other nodes' (see committer). A step's end
// is still durable before the next step runs, so a crash never loses a
// step that ran without also losing the start of the one after it.
func (c *Conductor) runSteps(id int, run string, steps []Step, who string) {
	ctx := context.WithoutCancel(c.ctx)
	ph := phases[run]
	kind := ph.kind
	n, err := c.db.Node.Get(ctx, id)
	if err != nil {
		c.log.Error("loading node for steps", "node", id, "err", err)
		return
	}
	// carry holds what waits for the next commit: the end of the step
	// that just ran.
	var carry write
	// A write that fails leaves carry for the failure record to take.
	commit := func(w write) error {
		w.updates = append(slices.Clone(carry.updates), w.updates...)
		w.events = append(slices.Clone(carry.events), w.events...)
		err := c.commits.do(ctx, c.db, w)
		if err == nil {
			carry = write{}
		}
		return err
	}
	// notAborted reads the abort flag in the transaction that starts a
	// step, rather than in a query of its own before it.
	notAborted := func(tx *ent.Client) error {
		n, err := tx.Node.Query().Where(node.ID(id)).Select(node.FieldDriverInternalInfo).Only(ctx)
		if err != nil {
			return err
		}
		if n.DriverInternalInfo[abortRequestedField] == true {
			return errAborted
		}
		return nil
	}
	event := func(sev, msg string) history.Event {
		return history.Event{NodeID: id, Severity: sev, Type: kind, Message: msg, User: who, Conductor: c.cfg.Name}
	}
	// update changes the node without reading it back, which ent's
	// UpdateOne would do after every write.
	update := func(set func(u *ent.NodeUpdate), step map[string]any) func(tx *ent.Client) error {
		return func(tx *ent.Client) error {
			u := tx.Node.Update().Where(node.ID(id))
			set(u)
			switch {
			case step == nil:
			case kind == "clean":
				u.SetCleanStep(step)
			case kind == "service":
				u.SetServiceStep(step)
			}
			return u.Exec(ctx)
		}
	}
	one := func(upd func(tx *ent.Client) error, ev history.Event) write {
		return write{updates: []func(tx *ent.Client) error{upd}, events: []history.Event{ev}}
	}
	// failWith records msg as last_error and msg plus detail in history:
	// a BMC's address and dial error stay out of last_error.
	failWith := func(msg, detail string) {
		ev := msg
		if detail != "" {
			ev += " (" + detail + ")"
		}
		err := commit(one(update(func(u *ent.NodeUpdate) {
			u.SetProvisionState(ph.failed).ClearTargetProvisionState().SetLastError(msg).SetProvisionUpdatedAt(time.Now())
		}, map[string]any{}), event(history.Error, ev)))
		if err != nil {
			c.log.Error("recording step failure", "node", id, "err", err)
		}
	}
	fail := func(msg string) { failWith(msg, "") }
	for i, st := range steps {
		if c.ctx.Err() != nil {
			fail(fmt.Sprintf("Conductor %s shut down before step %s; run the remaining steps again.", c.cfg.Name, st.Name()))
			return
		}
		// Progress lives in driver_internal_info, as Ironic keeps its
		// clean_step_index there: "step i of n" without reading history.
		n.DriverInternalInfo = cloneInfo(n.DriverInternalInfo)
		n.DriverInternalInfo[kind+"_step_index"] = i
		n.DriverInternalInfo[kind+"_step_total"] = len(steps)
		info := n.DriverInternalInfo
		start := one(update(func(u *ent.NodeUpdate) { u.SetProvisionState(ph.running).SetDriverInternalInfo(info) }, st.asMap()),
			event(history.Info, fmt.Sprintf("Step %s started (%d of %d)", st.Name(), i+1, len(steps))))
		start.updates = append([]func(tx *ent.Client) error{notAborted}, start.updates...)
		err := commit(start)
		if errors.Is(err, errAborted) {
			fail(fmt.Sprintf("Aborted by request before step %s.", st.Name()))
			return
		}
		if err != nil {
			fail(fmt.Sprintf("Could not record step %s: %v", st.Name(), err))
			return
		}
		power, err := c.execStep(ctx, n, ph, st)
		switch {
		case errors.Is(err, errHold):
			info := cloneInfo(n.DriverInternalInfo)
			info["pending_steps"] = stepsToAny(steps[i+1:])
			err := commit(one(update(func(u *ent.NodeUpdate) {
				u.SetProvisionState(ph.hold).SetDriverInternalInfo(info).SetProvisionUpdatedAt(time.Now())
			}, map[string]any{}), event(history.Info, fmt.Sprintf("On hold after step %s; unhold to run the %d remaining steps, or abort", st.Name(), len(steps)-i-1))))
			if err != nil {
				fail(fmt.Sprintf("Could not hold: %v", err))
			}
			return
		case errors.Is(err, errAborted):
			fail(fmt.Sprintf("Aborted by request during step %s.", st.Name()))
			return
		case errors.Is(err, errShutdown):
			fail(fmt.Sprintf("Conductor %s shut down during step %s; run the remaining steps again.", c.cfg.Name, st.Name()))
			return
		case err != nil:
			detail := ""
			if bmc.Summary(err) != err.Error() {
				detail = err.Error()
			}
			failWith(fmt.Sprintf("Step %s failed: %s", st.Name(), bmc.Summary(err)), detail)
			return
		}
		if power != "" {
			carry.updates = append(carry.updates, update(func(u *ent.NodeUpdate) { u.SetPowerState(power) }, nil))
		}
		carry.events = append(carry.events, event(history.Info, fmt.Sprintf("Step %s done", st.Name())))
	}
	info := cloneInfo(n.DriverInternalInfo)
	delete(info, "pending_steps")
	delete(info, abortRequestedField)
	delete(info, kind+"_step_index")
	delete(info, kind+"_step_total")
	// The final state and its event land together, so whoever sees the
	// node done also sees why.
	err = commit(one(update(func(u *ent.NodeUpdate) {
		u.SetProvisionState(ph.done).ClearTargetProvisionState().SetDriverInternalInfo(info).SetProvisionUpdatedAt(time.Now())
	}, map[string]any{}), event(history.Info, fmt.Sprintf("All %d %s steps done; node is %s", len(steps), kind, ph.done))))
	if err != nil {
		c.log.Error("recording step completion", "node", id, "err", err)
	}
}

// write is one node's changes and the events that explain them, which
// commit together.
type write struct {
	updates []func(tx *ent.Client) error
	events  []history.Event
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
	pgDrains = 4
)

// do commits w, grouped with whatever else is waiting.
func (g *committer) do(ctx context.Context, db *store.DB, w write) error {
	p := &pendingWrite{write: w, done: make(chan error, 1)}
	limit := 1
	if db.Dialect == dialect.Postgres {
		limit = pgDrains
	}
	g.mu.Lock()
	g.queue = append(g.queue, p)
	if g.running < limit {
		g.running++
		go g.drain(ctx, db)
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
		err := commitBatch(ctx, db, batch)
		if err == nil || len(batch) == 1 {
			for _, p := range batch {
				p.done <- err
			}
			continue
		}
		// One failed write must not fail its neighbours: each alone.
		for _, p := range batch {
			p.done <- commitBatch(ctx, db, []*pendingWrite{p})
		}
	}
}

func commitBatch(ctx context.Context, db *store.DB, batch []*pendingWrite) error {
	return store.WithTx(ctx, db, func(tx *ent.Client) error {
		var events []history.Event
		for _, p := range batch {
			for _, fn := range p.updates {
				if err := fn(tx); err != nil {
					return err
				}
			}
			events = append(events, p.events...)
		}
		return history.RecordAll(ctx, tx, events)
	})
}

func (c *Conductor) abortRequested(ctx context.Context, id int) bool {
	n, err := c.db.Node.Get(ctx, id)
	return err == nil && n.DriverInternalInfo[abortRequestedField] == true
}

// execStep runs one step and returns the power state it left, if it
// changed power. A BMC call always completes; only waiting is cut short
// by an abort or a shutdown.
func (c *Conductor) execStep(ctx context.Context, n *ent.Node, ph phase, st Step) (string, error) {
	switch st.Name() {
	case "deploy.deploy":
		return c.deployImage(ctx, n)
	case "deploy.hold":
		return "", errHold
	case "deploy.wait":
		secs, _ := st.Args["seconds"].(float64)
		if err := c.db.Node.UpdateOneID(n.ID).SetProvisionState(ph.wait).Exec(ctx); err != nil {
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
		return "", c.db.Node.UpdateOneID(n.ID).SetProvisionState(ph.running).Exec(ctx)
	}
	cl, err := c.client(n)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	switch st.Name() {
	case "power.power_on", "power.power_off", "power.reboot":
		target := map[string]string{"power.power_on": bmc.PowerOn, "power.power_off": bmc.PowerOff, "power.reboot": bmc.Rebooting}[st.Name()]
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
		return "", err
	}
	return "", fmt.Errorf("step %s has no implementation", st.Name())
}
