package conductor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
)

// phase holds the state names of cleaning or servicing.
type phase struct {
	running, wait, hold, failed, done string
}

var phases = map[string]phase{
	"clean":   {nodes.StateCleaning, nodes.StateCleanWait, StateCleanHold, nodes.StateCleanFailed, nodes.StateManageable},
	"service": {nodes.StateServicing, nodes.StateServiceWait, StateServiceHold, nodes.StateServiceFailed, nodes.StateActive},
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
func (c *Conductor) runSteps(id int, kind string, steps []Step, who string) {
	ctx := context.WithoutCancel(c.ctx)
	ph := phases[kind]
	n, err := c.db.Node.Get(ctx, id)
	if err != nil {
		c.log.Error("loading node for steps", "node", id, "err", err)
		return
	}
	event := func(sev, msg string) {
		_ = history.Record(ctx, c.db.Client, history.Event{NodeID: id, Severity: sev, Type: kind, Message: msg, User: who, Conductor: c.cfg.Name})
	}
	setStep := func(u *ent.NodeUpdateOne, m map[string]any) *ent.NodeUpdateOne {
		if kind == "clean" {
			return u.SetCleanStep(m)
		}
		return u.SetServiceStep(m)
	}
	// failWith records msg as last_error and msg plus detail in history:
	// a BMC's address and dial error stay out of last_error.
	failWith := func(msg, detail string) {
		u := c.db.Node.UpdateOneID(id).SetProvisionState(ph.failed).ClearTargetProvisionState().SetLastError(msg).SetProvisionUpdatedAt(time.Now())
		if err := setStep(u, map[string]any{}).Exec(ctx); err != nil {
			c.log.Error("recording step failure", "node", id, "err", err)
		}
		if detail != "" {
			msg += " (" + detail + ")"
		}
		event(history.Error, msg)
	}
	fail := func(msg string) { failWith(msg, "") }
	for i, st := range steps {
		if c.ctx.Err() != nil {
			fail(fmt.Sprintf("Conductor %s shut down before step %s; run the remaining steps again.", c.cfg.Name, st.Name()))
			return
		}
		if c.abortRequested(ctx, id) {
			fail(fmt.Sprintf("Aborted by request before step %s.", st.Name()))
			return
		}
		// The step and its event land together: one commit per change
		// keeps a SQLite conductor above a thousand steps a second.
		// Progress lives in driver_internal_info, as Ironic keeps its
		// clean_step_index there: "step i of n" without reading history.
		n.DriverInternalInfo = cloneInfo(n.DriverInternalInfo)
		n.DriverInternalInfo[kind+"_step_index"] = i
		n.DriverInternalInfo[kind+"_step_total"] = len(steps)
		err := store.WithTx(ctx, c.db, func(tx *ent.Client) error {
			u := tx.Node.UpdateOneID(id).SetProvisionState(ph.running).SetDriverInternalInfo(n.DriverInternalInfo)
			if err := setStep(u, st.asMap()).Exec(ctx); err != nil {
				return err
			}
			return history.Record(ctx, tx, history.Event{NodeID: id, Type: kind, User: who, Conductor: c.cfg.Name,
				Message: fmt.Sprintf("Step %s started (%d of %d)", st.Name(), i+1, len(steps))})
		})
		if err != nil {
			fail(fmt.Sprintf("Could not record step %s: %v", st.Name(), err))
			return
		}
		power, err := c.execStep(ctx, n, ph, st)
		switch {
		case errors.Is(err, errHold):
			info := cloneInfo(n.DriverInternalInfo)
			info["pending_steps"] = stepsToAny(steps[i+1:])
			u := c.db.Node.UpdateOneID(id).SetProvisionState(ph.hold).SetDriverInternalInfo(info).SetProvisionUpdatedAt(time.Now())
			if err := setStep(u, map[string]any{}).Exec(ctx); err != nil {
				fail(fmt.Sprintf("Could not hold: %v", err))
				return
			}
			event(history.Info, fmt.Sprintf("On hold after step %s; unhold to run the %d remaining steps, or abort", st.Name(), len(steps)-i-1))
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
		err = store.WithTx(ctx, c.db, func(tx *ent.Client) error {
			if power != "" {
				if err := tx.Node.UpdateOneID(id).SetPowerState(power).Exec(ctx); err != nil {
					return err
				}
			}
			return history.Record(ctx, tx, history.Event{NodeID: id, Type: kind, User: who, Conductor: c.cfg.Name,
				Message: fmt.Sprintf("Step %s done", st.Name())})
		})
		if err != nil {
			fail(fmt.Sprintf("Could not record the end of step %s: %v", st.Name(), err))
			return
		}
	}
	info := cloneInfo(n.DriverInternalInfo)
	delete(info, "pending_steps")
	delete(info, abortRequestedField)
	delete(info, kind+"_step_index")
	delete(info, kind+"_step_total")
	// The final state and its event land together, so whoever sees the
	// node done also sees why.
	err = store.WithTx(ctx, c.db, func(tx *ent.Client) error {
		u := tx.Node.UpdateOneID(id).SetProvisionState(ph.done).ClearTargetProvisionState().SetDriverInternalInfo(info).SetProvisionUpdatedAt(time.Now())
		if kind == "clean" {
			u.SetCleanStep(map[string]any{})
		} else {
			u.SetServiceStep(map[string]any{})
		}
		if err := u.Exec(ctx); err != nil {
			return err
		}
		return history.Record(ctx, tx, history.Event{NodeID: id, Type: kind, User: who, Conductor: c.cfg.Name,
			Message: fmt.Sprintf("All %d %s steps done; node is %s", len(steps), kind, ph.done)})
	})
	if err != nil {
		c.log.Error("recording step completion", "node", id, "err", err)
	}
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
