package bmctest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// FirmwareBMC is a small Redfish BMC in Go for what redfish-sim does not
// do: it stages BIOS images until the machine resets, answers
// SimpleUpdate without a Location header, and has a NetworkAdapter. One
// system (Systems/1), its manager (Managers/1) and one chassis with the
// adapter NIC.Slot.1 (serial FakeNICSerial); plain HTTP, Basic auth with
// redfish-sim's credentials.
type FirmwareBMC struct {
	URL string
	// Reply is how SimpleUpdate's 202 names its task: "location" (the
	// Location header), "odata" (only the body's @odata.id, the Task) or
	// "monitor" (only the body's TaskMonitor).
	Reply string
	// StageBIOS is how a BIOS task reports an image staged for the next
	// POST: "pending" (iDRAC: TaskState Pending until the machine resets)
	// or "completed" (iLO: Completed at once, the image applied only at the
	// reset). Either way the version changes only at a reset.
	StageBIOS string

	mu               sync.Mutex
	power            string
	bios, bmc, nic   string
	stagedBIOS       string
	tasks            []*fakeTask
	requests, bodies []string
	resets           []string
}

type fakeTask struct {
	component, image string
	state, message   string
	polls            int
}

// FakeNICSerial is the serial number of FirmwareBMC's adapter; Ironic and
// Anvil name it nic:FakeNICSerial.
const FakeNICSerial = "FAKESN0001"

// StartFirmwareBMC starts a FirmwareBMC replying as reply and staging BIOS
// images as stage; versions start at bios 1.0.0, bmc 1.00, nic 20.0.1.
func StartFirmwareBMC(t testing.TB, reply, stage string) *FirmwareBMC {
	f := &FirmwareBMC{Reply: reply, StageBIOS: stage, power: "Off", bios: "1.0.0", bmc: "1.00", nic: "20.0.1"}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// DriverInfo is a redfish driver_info for the fake's system.
func (f *FirmwareBMC) DriverInfo() map[string]any {
	return map[string]any{"redfish_address": f.URL, "redfish_system_id": "/redfish/v1/Systems/1",
		"redfish_username": RedfishUser, "redfish_password": RedfishPassword, "redfish_auth_type": "basic"}
}

// Versions are the BIOS, BMC and NIC versions the fake runs.
func (f *FirmwareBMC) Versions() (bios, bmc, nic string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bios, f.bmc, f.nic
}

// Requests lists "METHOD PATH" of every request served, oldest first.
func (f *FirmwareBMC) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// Bodies lists "METHOD PATH JSON" of every POST and PATCH.
func (f *FirmwareBMC) Bodies() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.bodies...)
}

// Resets lists the ResetTypes ComputerSystem.Reset received.
func (f *FirmwareBMC) Resets() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.resets...)
}

func link(p string) map[string]any { return map[string]any{"@odata.id": p} }

func (f *FirmwareBMC) taskJSON(n int) map[string]any {
	t := f.tasks[n]
	status := "OK"
	if t.state == "Exception" {
		status = "Critical"
	}
	m := map[string]any{"@odata.id": fmt.Sprintf("/redfish/v1/TaskService/Tasks/%d", n), "Id": fmt.Sprint(n), "TaskState": t.state, "TaskStatus": status,
		"TaskMonitor": fmt.Sprintf("/redfish/v1/TaskService/TaskMonitors/%d", n)}
	if t.message != "" {
		m["Messages"] = []any{map[string]any{"MessageId": t.message, "Message": ""}}
	}
	return m
}

// poll advances a task as a BMC would between two reads: BMC and NIC
// tasks run for one read and complete, applying their image (one whose
// URL contains "same" changes nothing); staged BIOS tasks wait for a
// reset.
func (f *FirmwareBMC) poll(t *fakeTask) {
	t.polls++
	if t.component == "bios" || t.state != "Running" || t.polls < 2 {
		return
	}
	t.state = "Completed"
	if strings.Contains(t.image, "same") {
		return // an image of the version the component runs
	}
	switch t.component {
	case "bmc":
		f.bmc = "1.01"
	case "nic":
		f.nic = "20.0.2"
	}
}

// post is the machine starting: staged BIOS images apply.
func (f *FirmwareBMC) post() {
	for _, t := range f.tasks {
		if t.component == "bios" && (t.state == "Pending" || t.state == "Completed") && f.stagedBIOS != "" {
			t.state, t.message = "Completed", ""
		}
	}
	if f.stagedBIOS != "" {
		f.bios, f.stagedBIOS = f.stagedBIOS, ""
	}
}

func (f *FirmwareBMC) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	if r.Method == "POST" || r.Method == "PATCH" {
		f.bodies = append(f.bodies, r.Method+" "+r.URL.Path+" "+string(body))
	}
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if v != nil {
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	p := strings.TrimSuffix(r.URL.Path, "/")
	if p != "/redfish/v1" {
		if u, pw, ok := r.BasicAuth(); !ok || u != RedfishUser || pw != RedfishPassword {
			reply(401, map[string]any{"error": map[string]any{"message": "credentials"}})
			return
		}
	}
	var n int
	switch {
	case r.Method == "GET" && p == "/redfish/v1":
		reply(200, map[string]any{"@odata.id": "/redfish/v1/", "Id": "RootService", "RedfishVersion": "1.11.0",
			"Systems": link("/redfish/v1/Systems"), "Managers": link("/redfish/v1/Managers"), "Chassis": link("/redfish/v1/Chassis"),
			"UpdateService": link("/redfish/v1/UpdateService"), "TaskService": link("/redfish/v1/TaskService")})
	case r.Method == "GET" && p == "/redfish/v1/Systems":
		reply(200, map[string]any{"@odata.id": p, "Members": []any{link("/redfish/v1/Systems/1")}, "Members@odata.count": 1})
	case r.Method == "GET" && p == "/redfish/v1/Systems/1":
		reply(200, map[string]any{"@odata.id": p, "Id": "1", "PowerState": f.power, "BiosVersion": f.bios,
			"Links": map[string]any{"ManagedBy": []any{link("/redfish/v1/Managers/1")}, "Chassis": []any{link("/redfish/v1/Chassis/1")}},
			"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{"target": p + "/Actions/ComputerSystem.Reset",
				"ResetType@Redfish.AllowableValues": []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart"}}}})
	case r.Method == "PATCH" && p == "/redfish/v1/Systems/1":
		reply(204, nil)
	case r.Method == "POST" && p == "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset":
		var b struct{ ResetType string }
		_ = json.Unmarshal(body, &b)
		f.resets = append(f.resets, b.ResetType)
		switch b.ResetType {
		case "ForceOff", "GracefulShutdown":
			f.power = "Off"
		case "On", "ForceOn", "ForceRestart", "GracefulRestart", "PowerCycle":
			f.power = "On"
			f.post()
		default:
			reply(400, map[string]any{"error": map[string]any{"message": "ResetType"}})
			return
		}
		reply(204, nil)
	case r.Method == "GET" && p == "/redfish/v1/Managers/1":
		reply(200, map[string]any{"@odata.id": p, "Id": "1", "FirmwareVersion": f.bmc, "Model": "Anvil Go fake BMC"})
	case r.Method == "GET" && p == "/redfish/v1/Chassis/1":
		reply(200, map[string]any{"@odata.id": p, "Id": "1", "NetworkAdapters": link(p + "/NetworkAdapters")})
	case r.Method == "GET" && p == "/redfish/v1/Chassis/1/NetworkAdapters":
		reply(200, map[string]any{"@odata.id": p, "Members": []any{link(p + "/NIC.Slot.1")}, "Members@odata.count": 1})
	case r.Method == "GET" && p == "/redfish/v1/Chassis/1/NetworkAdapters/NIC.Slot.1":
		reply(200, map[string]any{"@odata.id": p, "Id": "NIC.Slot.1", "SerialNumber": FakeNICSerial, "Manufacturer": "Acme", "Model": "X710",
			"Controllers": []any{map[string]any{"FirmwarePackageVersion": f.nic}}})
	case r.Method == "GET" && p == "/redfish/v1/UpdateService":
		reply(200, map[string]any{"@odata.id": p, "Id": "UpdateService",
			"Actions": map[string]any{"#UpdateService.SimpleUpdate": map[string]any{"target": p + "/Actions/UpdateService.SimpleUpdate"}}})
	case r.Method == "POST" && p == "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate":
		var b struct {
			ImageURI string
			Targets  []string
		}
		_ = json.Unmarshal(body, &b)
		t := &fakeTask{image: b.ImageURI, state: "Running"}
		switch {
		case len(b.Targets) != 1:
			reply(400, map[string]any{"error": map[string]any{"message": "one target"}})
			return
		case b.Targets[0] == "/redfish/v1/Systems/1":
			t.component = "bios"
			f.stagedBIOS = "1.1.0"
			t.state, t.message = "Pending", "IDRAC.2.8.SUP0001.PendingReboot"
			if f.StageBIOS == "completed" {
				t.state, t.message = "Completed", "iLO.2.14.UpdateStaged.ResetRequired"
			}
		case b.Targets[0] == "/redfish/v1/Managers/1":
			t.component = "bmc"
		case b.Targets[0] == "/redfish/v1/Chassis/1/NetworkAdapters/NIC.Slot.1":
			t.component = "nic"
		default:
			reply(400, map[string]any{"error": map[string]any{"message": "unknown target"}})
			return
		}
		if strings.Contains(b.ImageURI, "fail") {
			t.state, t.message, f.stagedBIOS = "Exception", "Base.1.8.InternalError", ""
		}
		f.tasks = append(f.tasks, t)
		n = len(f.tasks) - 1
		task := f.taskJSON(n)
		switch f.Reply {
		case "location":
			w.Header().Set("Location", task["@odata.id"].(string))
		case "monitor":
			task = map[string]any{"TaskMonitor": task["TaskMonitor"]}
		}
		reply(202, task)
	case r.Method == "GET" && scan(p, "/redfish/v1/TaskService/Tasks/%d", &n) && n < len(f.tasks):
		f.poll(f.tasks[n])
		reply(200, f.taskJSON(n))
	case r.Method == "GET" && scan(p, "/redfish/v1/TaskService/TaskMonitors/%d", &n) && n < len(f.tasks):
		// A monitor answers 202 with no Task while the task runs.
		f.poll(f.tasks[n])
		if t := f.tasks[n]; t.state == "Running" || t.state == "Pending" {
			reply(202, nil)
			return
		}
		reply(200, f.taskJSON(n))
	default:
		reply(404, map[string]any{"error": map[string]any{"message": "not found"}})
	}
}

func scan(p, format string, n *int) bool {
	_, err := fmt.Sscanf(p, format, n)
	return err == nil && fmt.Sprintf(format, *n) == p
}

// RedfishProxy is plain HTTP in front of a redfish-sim. The simulator
// does not restart its BMC after a BMC flash as real ones do; the proxy
// makes it: the first time it passes on a Completed task of a
// SimpleUpdate that targeted a manager, it first resets that manager on
// the simulator, which then answers 503 for its SIM_BMC_RESET_DOWNTIME.
// So whoever follows the task sees it complete and then the BMC go away.
type RedfishProxy struct {
	URL string
	sim *Redfish

	mu       sync.Mutex
	bmcTasks map[string]string // task path -> manager path
	resetted []string
}

type managerKey struct{}

// ProxyResettingBMC starts a RedfishProxy in front of the simulator.
func (r *Redfish) ProxyResettingBMC(t testing.TB) *RedfishProxy {
	target, _ := url.Parse(r.URL)
	p := &RedfishProxy{sim: r, bmcTasks: map[string]string{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the test's own simulator
	rp.ModifyResponse = p.modify
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req.Host = target.Host
		if req.Method == "POST" && strings.HasSuffix(req.URL.Path, "UpdateService.SimpleUpdate") {
			b, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
			req.Body = io.NopCloser(bytes.NewReader(b))
			var body struct{ Targets []string }
			_ = json.Unmarshal(b, &body)
			for _, tg := range body.Targets {
				if strings.Contains(tg, "/Managers/") {
					req = req.WithContext(context.WithValue(req.Context(), managerKey{}, tg))
				}
			}
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// DriverInfo is a redfish driver_info for system id through the proxy.
func (p *RedfishProxy) DriverInfo(id string) map[string]any {
	return map[string]any{"redfish_address": p.URL, "redfish_system_id": p.sim.SystemPath(id),
		"redfish_username": RedfishUser, "redfish_password": RedfishPassword}
}

// Resets lists the managers the proxy reset.
func (p *RedfishProxy) Resets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.resetted...)
}

func (p *RedfishProxy) modify(resp *http.Response) error {
	req := resp.Request
	if mgr, _ := req.Context().Value(managerKey{}).(string); mgr != "" && resp.StatusCode == 202 {
		ref := resp.Header.Get("Location")
		if u, err := url.Parse(ref); err == nil {
			ref = u.Path
		}
		p.mu.Lock()
		p.bmcTasks[ref] = mgr
		p.mu.Unlock()
		return nil
	}
	p.mu.Lock()
	mgr, ok := p.bmcTasks[req.URL.Path]
	p.mu.Unlock()
	if !ok || req.Method != "GET" || resp.StatusCode != 200 {
		return nil
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return err
	}
	var task struct{ TaskState string }
	if json.Unmarshal(b, &task) != nil || task.TaskState != "Completed" {
		return nil
	}
	// The flashed BMC restarts: reset it before the answer goes out.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own simulator
	rq, _ := http.NewRequest("POST", p.sim.URL+mgr+"/Actions/Manager.Reset", strings.NewReader(`{"ResetType":"GracefulRestart"}`))
	rq.Header.Set("Content-Type", "application/json")
	rq.SetBasicAuth(RedfishUser, RedfishPassword)
	rr, err := c.Do(rq)
	if err != nil {
		return err
	}
	rr.Body.Close()
	if rr.StatusCode >= 300 {
		return fmt.Errorf("resetting %s on the simulator: %d", mgr, rr.StatusCode)
	}
	p.mu.Lock()
	delete(p.bmcTasks, req.URL.Path)
	p.resetted = append(p.resetted, mgr)
	p.mu.Unlock()
	return nil
}
