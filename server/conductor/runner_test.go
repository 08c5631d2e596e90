package conductor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/ent/nodeevent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func fakeNode(t *testing.T, db *store.DB, info map[string]any) *ent.Node {
	t.Helper()
	n, err := db.Node.Create().SetUUID(uuid.NewString()).SetDriver("fake").SetProvisionState(nodes.StateCleaning).
		SetDriverInternalInfo(info).SetReservation("test").Save(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func events(t *testing.T, db *store.DB, id int) []string {
	t.Helper()
	evs, err := db.NodeEvent.Query().Where(nodeevent.HasNodeWith(node.ID(id))).Order(ent.Asc(nodeevent.FieldID)).All(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Event
	}
	return out
}

// TestCommitterIsolatesFailures sends many writes at once, some of which
// cannot commit (an event for a node that does not exist): each good
// write is committed and reported so, each bad one fails alone.
func TestCommitterIsolatesFailures(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		n := fakeNode(t, db, nil)
		var g committer
		const writers = 300
		errsSeen := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				target := n.ID
				if i%10 == 0 {
					target = n.ID + 1_000_000
				}
				errsSeen[i] = g.do(ctx, db, write{events: []history.Event{{NodeID: target, Type: "clean", Message: fmt.Sprintf("w%03d", i)}}})
			})
		}
		wg.Wait()
		for i, err := range errsSeen {
			if (i%10 == 0) != (err != nil) {
				t.Errorf("write %d: err %v", i, err)
			}
		}
		got := events(t, db, n.ID)
		if len(got) != writers-writers/10 {
			t.Errorf("%d events committed, want %d", len(got), writers-writers/10)
		}
	})
}

// TestStepsRecordEachStepAndHonourAbort runs steps through the grouped
// writes: every start and end is recorded in order, the node ends
// manageable, and an abort requested before a step stops the run there.
func TestStepsRecordEachStepAndHonourAbort(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		c := New(db, slog.New(slog.DiscardHandler), Config{Name: "test"})
		steps := []Step{{Interface: "power", Step: "power_on"}, {Interface: "management", Step: "reset_bmc"}, {Interface: "power", Step: "power_off"}}

		n := fakeNode(t, db, nil)
		c.runSteps(n, "clean", steps, "tester", false)
		got, err := db.Node.Get(ctx, n.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ProvisionState != nodes.StateManageable || got.PowerState == nil || *got.PowerState != "power off" || got.LastError != nil || got.Reservation != nil {
			t.Errorf("after the run: state %s, power %v, last_error %v, reservation %v", got.ProvisionState, got.PowerState, got.LastError, got.Reservation)
		}
		want := []string{"Step power.power_on started (1 of 3)", "Step power.power_on done", "Step management.reset_bmc started (2 of 3)",
			"Step management.reset_bmc done", "Step power.power_off started (3 of 3)", "Step power.power_off done", "All 3 clean steps done; node is manageable"}
		if ev := events(t, db, n.ID); strings.Join(ev, "|") != strings.Join(want, "|") {
			t.Errorf("events:\n%s\nwant:\n%s", strings.Join(ev, "\n"), strings.Join(want, "\n"))
		}

		aborted := fakeNode(t, db, map[string]any{abortRequestedField: true})
		c.runSteps(aborted, "clean", steps, "tester", false)
		got, err = db.Node.Get(ctx, aborted.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ProvisionState != nodes.StateCleanFailed || got.LastError == nil || !strings.Contains(*got.LastError, "Aborted by request before step power.power_on") || got.PowerState != nil || got.Reservation != nil {
			t.Errorf("aborted run: state %s, last_error %v, power %v, reservation %v (no step may run)", got.ProvisionState, got.LastError, got.PowerState, got.Reservation)
		}

		// A run whose lock another conductor took over (after this one
		// went silent) writes nothing more to the node.
		taken := fakeNode(t, db, nil)
		if err := db.Node.UpdateOneID(taken.ID).SetReservation("other").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		c.runSteps(taken, "clean", steps, "tester", false)
		got, err = db.Node.Get(ctx, taken.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ProvisionState != nodes.StateCleaning || got.Reservation == nil || *got.Reservation != "other" || got.PowerState != nil || len(events(t, db, taken.ID)) != 0 {
			t.Errorf("fenced run: state %s, reservation %v, power %v, events %v", got.ProvisionState, got.Reservation, got.PowerState, events(t, db, taken.ID))
		}
	})
}

// TestStepWritesShareOneStatement sends many nodes' step starts and run
// ends at once, so batches hold several: each write is fenced alone
// (another conductor's lock; for a start, also an abort request), the
// others land with their fields and events, and a fenced one records
// nothing.
func TestStepWritesShareOneStatement(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		ctx := context.Background()
		var g committer
		const count = 72
		at := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
		ns := make([]*ent.Node, count)
		for i := range ns {
			var info map[string]any
			if i%3 == 1 {
				info = map[string]any{abortRequestedField: true, "keep": "x"}
			}
			ns[i] = fakeNode(t, db, info)
			if err := db.Node.UpdateOneID(ns[i].ID).SetTargetProvisionState(nodes.StateManageable).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if i%3 == 2 {
				if err := db.Node.UpdateOneID(ns[i].ID).SetReservation("other").Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		kind := func(i int) string { return []string{"clean", "service"}[i/3%2] }
		// Every fourth write ends its run; the others start a step.
		end := func(i int) bool { return i%4 == 0 }
		errsSeen := make([]error, count)
		var wg sync.WaitGroup
		for i, n := range ns {
			wg.Go(func() {
				s := &stepWrite{id: n.ID, holder: "test", state: nodes.StateCleanWait, kind: kind(i),
					info: map[string]any{"clean_step_index": i}, step: map[string]any{"interface": "power", "step": "power_on", "n": i}}
				if end(i) {
					s.end, s.at, s.state, s.step = true, at, nodes.StateManageable, map[string]any{}
				}
				if i%2 == 0 {
					s.power = "power on"
				}
				errsSeen[i] = g.do(ctx, db, write{step: s, events: []history.Event{{NodeID: n.ID, Type: "clean", Message: fmt.Sprintf("write %d", i)}}})
			})
		}
		wg.Wait()
		for i, n := range ns {
			got, err := db.Node.Get(ctx, n.ID)
			if err != nil {
				t.Fatal(err)
			}
			ev := events(t, db, n.ID)
			// Another conductor's lock fences every write; an abort
			// request fences a start but not an end.
			if i%3 == 2 || (i%3 == 1 && !end(i)) {
				if !errors.Is(errsSeen[i], errFenced) || got.ProvisionState != nodes.StateCleaning || got.CleanStep != nil || got.ServiceStep != nil || got.PowerState != nil || len(ev) != 0 {
					t.Errorf("fenced node %d: err %v, state %s, clean_step %v, service_step %v, power %v, events %v", i, errsSeen[i], got.ProvisionState, got.CleanStep, got.ServiceStep, got.PowerState, ev)
				}
				continue
			}
			step, other := got.CleanStep, got.ServiceStep
			if kind(i) == "service" {
				step, other = other, step
			}
			wantState, wantStep := nodes.StateCleanWait, fmt.Sprint(i)
			if end(i) {
				wantState, wantStep = nodes.StateManageable, "<nil>"
			}
			wantPower := i%2 == 0
			if errsSeen[i] != nil || got.ProvisionState != wantState || fmt.Sprint(step["n"]) != wantStep || other != nil ||
				fmt.Sprint(got.DriverInternalInfo["clean_step_index"]) != fmt.Sprint(i) || (got.PowerState != nil) != wantPower ||
				strings.Join(ev, "|") != fmt.Sprintf("write %d", i) {
				t.Errorf("node %d (%s, end %v): err %v, state %s, step %v, other %v, info %v, power %v, events %v", i, kind(i), end(i), errsSeen[i], got.ProvisionState, step, other, got.DriverInternalInfo, got.PowerState, ev)
			}
			switch {
			case end(i) && (got.Reservation != nil || got.TargetProvisionState != nil || got.ProvisionUpdatedAt == nil || !got.ProvisionUpdatedAt.Equal(at)):
				t.Errorf("ended node %d: reservation %v, target %v, provision_updated_at %v (want released, no target, %v)", i, got.Reservation, got.TargetProvisionState, got.ProvisionUpdatedAt, at)
			case !end(i) && (got.Reservation == nil || *got.Reservation != "test" || got.TargetProvisionState == nil || got.ProvisionUpdatedAt != nil):
				t.Errorf("started node %d: reservation %v, target %v, provision_updated_at %v (want kept)", i, got.Reservation, got.TargetProvisionState, got.ProvisionUpdatedAt)
			}
		}
	})
}

// TestBatchedEventsKeepTheirProject: writes of two projects' callers and
// of the conductor itself share batches; each event records its own
// caller's project (the conductor's none), never the project of
// whichever caller happened to open the batch.
func TestBatchedEventsKeepTheirProject(t *testing.T) {
	storetest.Each(t, func(t *testing.T, _ string, db *store.DB) {
		n := fakeNode(t, db, nil)
		var g committer
		callers := []string{"proj-a", "proj-b", ""}
		const each = 40
		var wg sync.WaitGroup
		for i := range each * len(callers) {
			project := callers[i%len(callers)]
			ctx := context.Background()
			if project != "" {
				ctx = policies.WithPrincipal(ctx, &policies.Principal{User: "u-" + project, Project: project, Roles: []string{"member"}})
			}
			wg.Go(func() {
				if err := g.do(ctx, db, write{events: []history.Event{{NodeID: n.ID, Type: "clean", Message: "by " + project}}}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		evs, err := db.NodeEvent.Query().Where(nodeevent.HasNodeWith(node.ID(n.ID))).All(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != each*len(callers) {
			t.Fatalf("%d events, want %d", len(evs), each*len(callers))
		}
		for _, e := range evs {
			if want := strings.TrimPrefix(e.Event, "by "); e.Project != want {
				t.Errorf("event %q recorded project %q", e.Event, e.Project)
			}
		}
	})
}
