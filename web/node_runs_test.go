package web

import (
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// TestGroupHistoryFailedRun: a run of explicit steps that failed, between
// other events, is one group with its error and outcome; the runbook
// section then says it failed with the error's summary, and not that a
// later return to manageable made it succeed.
func TestGroupHistoryFailedRun(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	ev := func(id, sec int, typ, sev, msg string) *ent.NodeEvent {
		return &ent.NodeEvent{ID: id, CreatedAt: t0.Add(time.Duration(sec) * time.Second), EventType: typ, Severity: sev, Event: msg, User: "ann"}
	}
	// Newest first, as HistoryPage gives them.
	evs := []*ent.NodeEvent{
		ev(6, 40, "provision", history.Info, "manage: clean failed -> manageable"),
		ev(5, 30, "clean", history.Error, "Step power.power_off failed: the BMC did not answer"),
		ev(7, 25, "clean", history.Info, "Step power.power_off started (2 of 2)"),
		ev(4, 20, "power", history.Info, "Power on done"),
		ev(3, 12, "clean", history.Info, "Step power.power_on done"),
		ev(2, 10, "clean", history.Info, "Step power.power_on started (1 of 2)"),
		ev(1, 0, "provision", history.Info, "manage: enroll -> manageable"),
	}
	items := groupHistory(evs, false, true)
	if len(items) != 3 || items[0].Run != nil || items[2].Run != nil || items[1].Run == nil {
		t.Fatalf("want event, run, event: %+v", items)
	}
	r := items[1].Run
	if r.ID != 2 || r.Title != "Clean steps" || r.Outcome != "failed" || r.Duration != "20 s" || len(r.Events) != 5 ||
		r.Error != "Step power.power_off failed: the BMC did not answer" || r.Events[0].Event != r.Error {
		t.Errorf("run group: %+v", r)
	}
	d := &views.NodeDetail{History: items}
	v := &nodes.View{}
	v.Node = &ent.Node{ProvisionState: nodes.StateManageable}
	if f := runFeedback(d, v); f == nil || f.Succeeded || f.Running || f.What != "Clean steps" || f.Summary != r.Error {
		t.Errorf("feedback after recovering a failed run: %+v", f)
	}
	// A power action after the run makes the node busy, not the run.
	v.Node.DriverInternalInfo = map[string]any{"last_run": map[string]any{"target": "clean", "runbook": "CUSTOM_X",
		"steps": []any{map[string]any{"interface": "power", "step": "power_on"}}}}
	if f := runFeedback(&views.NodeDetail{Busy: true, History: items}, v); f == nil || f.Running {
		t.Errorf("a power action after the run shows it running: %+v", f)
	}
	v.Node.ProvisionState = nodes.StateCleanWait
	if f := runFeedback(&views.NodeDetail{Busy: true, History: items}, v); f == nil || !f.Running || f.What != "runbook CUSTOM_X" {
		t.Errorf("a run in clean wait: %+v", f)
	}
	// The run's page: each step with how long it took and how it ended.
	if s := runSteps(r.Events); len(s) != 2 || s[0].Name != "power.power_on" || s[0].Took != "2 s" || s[0].Outcome != "done" ||
		s[1].Name != "power.power_off" || s[1].Took != "5 s" || s[1].Outcome != "failed" {
		t.Errorf("steps: %+v", s)
	}
	// Held after a step, the run says so.
	held := append([]*ent.NodeEvent{ev(8, 15, "clean", history.Info, "On hold after step power.power_on; unhold to run the 1 remaining steps, or abort")}, evs[3:]...)
	if items := groupHistory(held, false, true); items[0].Run == nil || items[0].Run.Outcome != "on hold" {
		t.Errorf("a held run: %+v", items[0])
	}
	// While busy, an open run is in progress.
	if items := groupHistory(evs[4:], true, true); items[0].Run == nil || items[0].Run.Outcome != "in progress" {
		t.Errorf("an open run while busy: %+v", items[0])
	}
}
