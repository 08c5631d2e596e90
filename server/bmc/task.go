package bmc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/stmcginnis/gofish/common"
)

// Task is a BMC task's progress.
type Task struct {
	State   string // Redfish TaskState: Running, Completed, Exception, …
	Status  string // Redfish TaskStatus: OK, Warning, Critical
	Percent int
	Message string // the BMC's messages, joined
	// Gone: the BMC no longer has the task (404). Ironic takes that as a
	// task that ended well, since BMCs purge finished tasks.
	Gone bool
	// PowerCycle: the BMC waits for the host to be power cycled before
	// it goes on (bmclib's powercycle-host, a Dell job Scheduled for the
	// next reset).
	PowerCycle bool
}

// Done reports whether the task ended: every state but those Ironic
// keeps polling (New, Starting, Running, Pending) is an end.
func (t Task) Done() bool {
	switch t.State {
	case "New", "Starting", "Running", "Pending":
		return false
	}
	return true
}

// Failed reports whether the task ended other than Completed with an OK
// or Warning status, Ironic's test of success.
func (t Task) Failed() bool {
	return t.Done() && (t.State != "Completed" || (t.Status != "" && t.Status != "OK" && t.Status != "Warning"))
}

// dellJobStates maps a Dell Job's JobState (iDRAC answers requests with
// /Managers/iDRAC.Embedded.1/Jobs/JID_…) to the Redfish TaskState Task
// speaks; the states not listed are still under way.
var dellJobStates = map[string]string{
	"Completed": "Completed", "Failed": "Exception", "CompletedWithErrors": "Exception",
	"RebootFailed": "Exception",
}

// readTask reads what a BMC gave to follow its work: a task monitor
// answers 202 while the work runs and may carry no Task (then any other
// success is the end), a Task has TaskState and TaskStatus, a Dell Job
// JobState. A task the BMC no longer has (404, 410) is Gone and taken as
// done, as Ironic takes it: BMCs purge finished tasks.
func (c *redfishClient) readTask(ctx context.Context, op, path string) (Task, error) {
	var t Task
	err := c.do(ctx, op, func() error {
		resp, err := c.api.Get(path)
		var rf *common.Error
		if errors.As(err, &rf) && (rf.HTTPReturnedStatusCode == http.StatusNotFound || rf.HTTPReturnedStatusCode == http.StatusGone) {
			t = Task{State: "Completed", Gone: true}
			return nil
		}
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var raw struct {
			TaskState, TaskStatus string
			PercentComplete       int
			Messages              []struct {
				Message   string
				MessageID string `json:"MessageId"`
			}
			JobState, Message string
		}
		// A monitor may answer with no body, or one that is not JSON.
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&raw)
		switch {
		case raw.TaskState != "":
			t = Task{State: raw.TaskState, Status: raw.TaskStatus, Percent: raw.PercentComplete}
			var msgs []string
			for _, m := range raw.Messages {
				// An empty or bare "Unknown" message says nothing: the id
				// does (as Ironic; sushy fills an empty one from its
				// registry).
				if m.Message == "" || strings.EqualFold(m.Message, "unknown") || strings.EqualFold(m.Message, "unknown error") {
					m.Message = m.MessageID
				}
				if m.Message != "" {
					msgs = append(msgs, m.Message)
				}
			}
			t.Message = strings.Join(msgs, "; ")
		case raw.JobState != "":
			t = Task{State: "Running", Percent: raw.PercentComplete, Message: raw.Message}
			if s, ok := dellJobStates[raw.JobState]; ok {
				t.State = s
			}
			if t.Failed() {
				t.Message = "job " + raw.JobState + ": " + raw.Message
			}
		case resp.StatusCode == http.StatusAccepted:
			t = Task{State: "Running"}
		default:
			t = Task{State: "Completed"}
		}
		// A monitor's 202 means running whatever its body holds.
		if resp.StatusCode == http.StatusAccepted && t.Done() {
			t.State = "Running"
		}
		return nil
	})
	return t, err
}
