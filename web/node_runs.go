package web

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/views"
)

// The conductor's words for a run's start and end (operations.go and
// runner.go): a runbook's header, the first step, and all steps done.
var (
	runbookHeader = regexp.MustCompile(`^Runbook (.+), run by (.+): (clean|service) with \d+ step\(s\)$`)
	firstStep     = regexp.MustCompile(`^Step \S+ started \(1 of \d+\)$`)
	allDone       = regexp.MustCompile(`^(All \d+|No) (clean|service) steps (done|to run)`)
)

// groupHistory gathers a page of events (newest first) into runs: from a
// runbook's header or a run's first step to the event that ended it (all
// steps done, or an error), every event between belonging to the run.
// Other events stay as they were, in the same order.
// system says whether the viewer acts for the system: only then do the
// events keep the conductor's API pointers (forViewer).
func groupHistory(evs []*ent.NodeEvent, busy, system bool) []views.HistoryItem {
	var items []views.HistoryItem // oldest first while building
	var cur *views.RunGroup
	row := func(e *ent.NodeEvent) views.EventRow {
		return views.EventRow{At: e.CreatedAt, Severity: e.Severity, Event: forViewer(system, e.Event), User: e.User}
	}
	end := func(outcome string) {
		cur.Outcome = outcome
		last := cur.Events[len(cur.Events)-1].At
		cur.Duration = elapsed(last.Sub(cur.Start))
		cur = nil
	}
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		header := runbookHeader.FindStringSubmatch(e.Event)
		// A runbook's first step follows its header: the same run.
		joins := cur != nil && len(cur.Events) == 1 && strings.HasPrefix(cur.Title, "Runbook ")
		if header != nil || (firstStep.MatchString(e.Event) && !joins) {
			if cur != nil {
				end("no end recorded")
			}
			cur = &views.RunGroup{ID: e.ID, User: e.User, Start: e.CreatedAt}
			if header != nil {
				cur.Title = "Runbook " + header[1]
			} else {
				cur.Title = strings.ToUpper(e.EventType[:1]) + e.EventType[1:] + " steps"
			}
			items = append(items, views.HistoryItem{Run: cur})
		}
		if cur == nil {
			if n := len(items); n > 0 && items[n-1].Run == nil {
				items[n-1].Events = append(items[n-1].Events, row(e))
			} else {
				items = append(items, views.HistoryItem{Events: []views.EventRow{row(e)}})
			}
			continue
		}
		cur.Events = append(cur.Events, row(e))
		switch {
		case allDone.MatchString(e.Event):
			end("succeeded")
		case e.Severity == history.Error:
			cur.Error = forViewer(system, e.Event)
			end("failed")
		}
	}
	if cur != nil {
		switch {
		case busy:
			end("in progress")
		case strings.HasPrefix(cur.Events[len(cur.Events)-1].Event, "On hold after step"):
			end("on hold")
		default:
			end("no end recorded")
		}
	}
	for _, it := range items {
		// Newest first, as the rest of the history reads.
		for i, j := 0, len(it.Events)-1; i < j; i, j = i+1, j-1 {
			it.Events[i], it.Events[j] = it.Events[j], it.Events[i]
		}
		if it.Run != nil {
			r := it.Run.Events
			for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
				r[i], r[j] = r[j], r[i]
			}
		}
	}
	for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
		items[i], items[j] = items[j], items[i]
	}
	return items
}

// runFeedback is what became of the node's last clean or service run,
// for the runbook section to say where the Run button was: running while
// the node cleans or services (not while a power action is under way),
// else the outcome of the newest run in the
// history (last_run outlives a failed run's recovery, so it cannot say).
func runFeedback(d *views.NodeDetail, v *nodes.View) *views.RunFeedback {
	running := slices.Contains([]string{nodes.StateCleaning, nodes.StateCleanWait, nodes.StateServicing, nodes.StateServiceWait}, v.ProvisionState)
	if running {
		// A viewer who may not read driver_internal_info (a lessee) has
		// no last_run: the newest run in the history names it, and
		// never an earlier run's outcome while this one works.
		what := "the run"
		if r, ok := lastRun(v); ok {
			what = "the steps"
			if r.runbook != "" {
				what = "runbook " + r.runbook
			}
		} else {
			for _, it := range d.History {
				if it.Run != nil {
					what = it.Run.Title
					break
				}
			}
		}
		return &views.RunFeedback{What: what, Running: true}
	}
	for _, it := range d.History {
		if it.Run == nil {
			continue
		}
		switch it.Run.Outcome {
		case "succeeded":
			return &views.RunFeedback{What: it.Run.Title, Succeeded: true, RunID: it.Run.ID}
		case "failed":
			sum := d.ErrorSummary
			if sum == "" || v.ProvisionState != nodes.StateCleanFailed && v.ProvisionState != nodes.StateServiceFailed {
				sum = it.Run.Error
			}
			return &views.RunFeedback{What: it.Run.Title, Summary: sum, RunID: it.Run.ID}
		}
		return nil
	}
	return nil
}

// runScanPage is how many events the run page reads at a time, newest
// first, looking for the run's first event.
const runScanPage = 200

// stepEvent reads a step's start, end or failure from its event.
var stepEvent = regexp.MustCompile(`^Step (\S+) (started|done|failed)`)

// nodeRunPage shows one run of the node's history: its steps with their
// start and how long each took, who ran it, how it ended and its error.
// The run is named by its first event's id, as the history anchors it.
func (p *Portal) nodeRunPage(c *fiber.Ctx) error {
	ctx := c.UserContext()
	v, err := p.Nodes.Get(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	id, err := strconv.Atoi(c.Params("run"))
	if err != nil || id < 1 {
		return p.ErrorPage(c, 400, "run: not a run number from this node's history")
	}
	var evs []*ent.NodeEvent
	for off := 0; ; off += runScanPage {
		page, _, err := p.Nodes.HistoryPage(ctx, v.UUID, off, runScanPage)
		if err != nil {
			return p.fail(c, err)
		}
		evs = append(evs, page...)
		if len(page) < runScanPage || slices.ContainsFunc(page, func(e *ent.NodeEvent) bool { return e.ID == id }) {
			break
		}
	}
	busy := slices.Contains(busyStates, v.ProvisionState)
	for _, it := range groupHistory(evs, busy, isSystem(ctx)) {
		if it.Run != nil && it.Run.ID == id {
			pg, err := p.page(c, it.Run.Title)
			if err != nil {
				return err
			}
			return render(c, 200, views.RunPage(pg, v.UUID, nameOr(deref(v.Name), v.UUID), *it.Run, runSteps(it.Run.Events)))
		}
	}
	return p.ErrorPage(c, 404, fmt.Sprintf("No run %d in the history of this node.", id))
}

// runSteps reads a run's steps from its events (newest first): when each
// started, how long it took and how it ended.
func runSteps(evs []views.EventRow) []views.StepTiming {
	var steps []views.StepTiming
	for i := len(evs) - 1; i >= 0; i-- {
		m := stepEvent.FindStringSubmatch(evs[i].Event)
		if m == nil {
			continue
		}
		if m[2] == "started" {
			steps = append(steps, views.StepTiming{Name: m[1], Started: evs[i].At, Outcome: "running"})
			continue
		}
		for j := len(steps) - 1; j >= 0; j-- {
			if steps[j].Name == m[1] && steps[j].Outcome == "running" {
				steps[j].Took = elapsed(evs[i].At.Sub(steps[j].Started))
				steps[j].Outcome = m[2]
				break
			}
		}
	}
	return steps
}
