package bmctest

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// RAIDMode is how a RAIDProxy answers volume requests.
type RAIDMode struct {
	// ApplyTimes is the volume collection's
	// @Redfish.OperationApplyTimeSupport SupportedValues.
	ApplyTimes []string
	// Job answers with an iDRAC Job
	// (/redfish/v1/Managers/iDRAC.Embedded.1/Jobs/JID_…) instead of a
	// Redfish task monitor.
	Job bool
	// Fail ends the task in Exception (TaskStatus Critical) with this
	// message, building nothing.
	Fail string
	// Location, when set, has volume POSTs go to the simulator at once,
	// answered with its 201 but this Location: a BMC naming a job where a
	// volume should be.
	Location string
}

// RAIDProxy stands in front of redfish-sim and makes its system 1's
// volumes behave as a BMC that builds RAID in the background, which the
// simulator (it creates volumes synchronously) cannot: the volume
// collection advertises the mode's apply times, and a volume POST or
// DELETE is answered 202 with a task, done by the simulator only later.
// A request asked OnReset waits for a ComputerSystem.Reset the simulator
// accepts; one asked Immediate (or without an apply time) runs while the
// task is followed, finishing on the task's second read. Everything else
// goes to the simulator as it is.
type RAIDProxy struct {
	URL  string
	sim  *Redfish
	mode RAIDMode
	fwd  *httputil.ReverseProxy
	hc   *http.Client

	mu     sync.Mutex
	log    []string // "METHOD PATH STATUS", as the simulator's Requests
	bodies []string // "METHOD PATH JSON" of the volume requests
	tasks  map[string]*raidTask
	hidden map[string]bool // volume paths deleted (the simulator refuses DELETE)
	n      int
}

// raidTask is one volume request the proxy answered 202.
type raidTask struct {
	id      string
	method  string // POST (create) or DELETE
	path    string // the collection (POST) or the volume (DELETE)
	body    []byte // the POST, without its apply time
	onReset bool
	reads   int
	state   string // Running, Completed, Exception
}

const volumesPath = "/redfish/v1/Systems/1/Storage/1/Volumes"

// StartRAIDProxy serves a proxy in front of sim until the test ends.
func StartRAIDProxy(t testing.TB, sim *Redfish, mode RAIDMode) *RAIDProxy {
	t.Helper()
	u, err := url.Parse(sim.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the test's own simulator
	p := &RAIDProxy{sim: sim, mode: mode, fwd: httputil.NewSingleHostReverseProxy(u), hc: &http.Client{Transport: tr},
		tasks: map[string]*raidTask{}, hidden: map[string]bool{}}
	p.fwd.Transport = tr
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// DriverInfo is a redfish driver_info for the simulator's system 1
// through the proxy.
func (p *RAIDProxy) DriverInfo() map[string]any {
	return map[string]any{"redfish_address": p.URL, "redfish_system_id": p.sim.SystemPath("1"),
		"redfish_username": RedfishUser, "redfish_password": RedfishPassword}
}

// Requests lists every request the proxy served, as "METHOD PATH
// STATUS", oldest first.
func (p *RAIDProxy) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// Bodies lists the volume requests' bodies, as "METHOD PATH JSON".
func (p *RAIDProxy) Bodies() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.bodies)
}

// Resource reads path through the proxy, as Anvil sees it.
func (p *RAIDProxy) Resource(t testing.TB, path string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL+path, nil)
	req.SetBasicAuth(RedfishUser, RedfishPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("proxy GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("proxy GET %s: %d %v", path, resp.StatusCode, err)
	}
	return m
}

// status records the status a handler answered.
type status struct {
	http.ResponseWriter
	code int
}

func (s *status) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (p *RAIDProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &status{ResponseWriter: w, code: 200}
	p.serve(sw, r)
	p.mu.Lock()
	p.log = append(p.log, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, sw.code))
	p.mu.Unlock()
}

func (p *RAIDProxy) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == volumesPath && r.Method == http.MethodGet:
		p.volumes(w, r)
	case path == volumesPath && r.Method == http.MethodPost && p.mode.Location != "":
		p.relocate(w, r)
	case path == volumesPath && r.Method == http.MethodPost,
		strings.HasPrefix(path, volumesPath+"/") && r.Method == http.MethodDelete:
		p.request(w, r)
	case strings.HasPrefix(path, "/redfish/v1/TaskService/TaskMonitors/"),
		strings.HasPrefix(path, "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs/"):
		p.task(w, path)
	case path == "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset" && r.Method == http.MethodPost:
		p.reset(w, r)
	default:
		p.fwd.ServeHTTP(w, r)
	}
}

// volumes is the simulator's collection with the mode's apply times,
// without the volumes deleted through the proxy.
func (p *RAIDProxy) volumes(w http.ResponseWriter, r *http.Request) {
	// The body is rewritten, so it must come back plain.
	r.Header.Del("Accept-Encoding")
	rec := httptest.NewRecorder()
	p.fwd.ServeHTTP(rec, r)
	var coll map[string]any
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &coll) != nil {
		copyResponse(w, rec)
		return
	}
	p.mu.Lock()
	var members []any
	for _, m := range coll["Members"].([]any) {
		if id, _ := m.(map[string]any)["@odata.id"].(string); !p.hidden[id] {
			members = append(members, m)
		}
	}
	p.mu.Unlock()
	coll["Members"], coll["Members@odata.count"] = members, len(members)
	if p.mode.ApplyTimes != nil {
		coll["@Redfish.OperationApplyTimeSupport"] = map[string]any{
			"@odata.type": "#Settings.v1_3_3.OperationApplyTimeSupport", "SupportedValues": p.mode.ApplyTimes}
	}
	writeJSON(w, 200, coll, nil)
}

// request answers a volume POST or DELETE 202 with a task.
func (p *RAIDProxy) request(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m map[string]any
	if len(body) > 0 && json.Unmarshal(body, &m) != nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"message": "body is not JSON"}}, nil)
		return
	}
	at, _ := m["@Redfish.OperationApplyTime"].(string)
	delete(m, "@Redfish.OperationApplyTime")
	fwd, _ := json.Marshal(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bodies = append(p.bodies, r.Method+" "+r.URL.Path+" "+string(body))
	p.n++
	t := &raidTask{method: r.Method, path: r.URL.Path, body: fwd, onReset: at == "OnReset", state: "Running"}
	loc := "/redfish/v1/TaskService/TaskMonitors/" + strconv.Itoa(p.n)
	if p.mode.Job {
		t.id = "JID_" + strconv.Itoa(122+p.n)
		loc = "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs/" + t.id
	}
	p.tasks[loc] = t
	writeJSON(w, 202, map[string]any{}, map[string]string{"Location": loc})
}

// relocate forwards a volume POST and answers with the mode's Location.
func (p *RAIDProxy) relocate(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.bodies = append(p.bodies, r.Method+" "+r.URL.Path+" "+string(body))
	p.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	p.fwd.ServeHTTP(rec, r)
	if rec.Code/100 == 2 {
		rec.Header().Set("Location", p.mode.Location)
	}
	copyResponse(w, rec)
}

// task answers a task monitor (202 and the Task while it runs, 200 and
// the Task when it ended) or a Dell Job (200 and its JobState).
func (p *RAIDProxy) task(w http.ResponseWriter, path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tasks[path]
	if t == nil {
		writeJSON(w, 404, map[string]any{"error": map[string]any{"message": "no task " + path}}, nil)
		return
	}
	t.reads++
	if t.state == "Running" && !t.onReset && t.reads >= 2 {
		p.apply(t)
	}
	if p.mode.Job {
		job := map[string]any{"@odata.type": "#DellJob.v1_5_0.DellJob", "Id": t.id, "JobType": "RAIDConfiguration",
			"JobState": map[string]string{"Running": "Scheduled", "Completed": "Completed", "Exception": "Failed"}[t.state], "Message": "Task successfully scheduled."}
		if t.state == "Completed" {
			job["Message"], job["PercentComplete"] = "Job completed successfully.", 100
		}
		if t.state == "Exception" {
			job["Message"] = p.mode.Fail
		}
		writeJSON(w, 200, job, nil)
		return
	}
	task := map[string]any{"@odata.type": "#Task.v1_4_3.Task", "Id": path[strings.LastIndex(path, "/")+1:], "TaskState": t.state, "TaskStatus": "OK"}
	code := 200
	switch t.state {
	case "Running":
		code, task["TaskState"] = 202, "Pending"
		if !t.onReset {
			task["TaskState"] = "Running"
		}
	case "Exception":
		task["TaskStatus"], task["Messages"] = "Critical", []any{map[string]any{"MessageId": "Base.1.8.GeneralError", "Message": p.mode.Fail}}
	}
	writeJSON(w, code, task, nil)
}

// apply does t's work on the simulator, or fails it as the mode says.
// Called with the lock held.
func (p *RAIDProxy) apply(t *raidTask) {
	t.state = "Completed"
	switch {
	case p.mode.Fail != "":
		t.state = "Exception"
	case t.method == http.MethodDelete:
		p.hidden[t.path] = true
	default:
		req, _ := http.NewRequest(http.MethodPost, p.sim.URL+t.path, bytes.NewReader(t.body))
		req.SetBasicAuth(RedfishUser, RedfishPassword)
		req.Header.Set("Content-Type", "application/json")
		resp, err := p.hc.Do(req)
		if err != nil {
			t.state = "Exception"
			return
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.state = "Exception"
		}
	}
}

// reset forwards the reset and, once the simulator took it, does the
// work waiting for it before answering.
func (p *RAIDProxy) reset(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	p.fwd.ServeHTTP(rec, r)
	if rec.Code/100 == 2 {
		p.mu.Lock()
		for _, t := range p.tasks {
			if t.onReset && t.state == "Running" {
				p.apply(t)
			}
		}
		p.mu.Unlock()
	}
	copyResponse(w, rec)
}

func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func writeJSON(w http.ResponseWriter, code int, v any, headers map[string]string) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
