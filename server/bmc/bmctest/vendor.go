package bmctest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// VendorBMC is a recorded-exchange fake of one vendor's BMC as bmclib
// v2.3.5's provider for it talks to it: Dell iDRAC and OpenBMC (Redfish
// sessions, a multipart UpdateService push, TaskService tasks, Dell's
// task Oem job), Supermicro X12 (the web login, CSRF token and XML API
// the provider tries first, then the same Redfish, with an upload task
// that verifies the image and UpdateService.StartUpdate to install it),
// and ASRockRack (its JSON API: session, flash mode, upload,
// verification, upgrade, flash progress, fw-info, BMC reset). Written
// from the providers' source, not from bmclib's fixtures.
//
// It listens on port 443, the only port bmclib's Dell, Supermicro and
// OpenBMC providers dial, of a loopback address of its own, with a
// certificate for that address (CAPEM). It records what it received:
// the image bytes, the component, the install calls, every request.
type VendorBMC struct {
	Vendor string
	// Addr is the loopback address it listens on, port 443.
	Addr  string
	CAPEM string
	// Fail makes each install task end in failure with FailMessage.
	Fail        bool
	FailMessage string
	// PowerCycle: the install waits (Dell: job Scheduled) until the host
	// is power cycled.
	PowerCycle bool
	// AwayPolls: once the install runs, the BMC drops this many
	// connections unanswered, as a BMC restarting mid-flash.
	AwayPolls int
	// Screen is what a console screenshot returns: Dell's PNG (base64 in
	// JSON), Supermicro's JPEG preview. It starts as ScreenPNG or
	// ScreenJPEG.
	Screen []byte

	mu        sync.Mutex
	bios, bmc string
	power     string
	sessions  map[string]bool
	tasks     []*vendorTask
	uploads   []Upload
	calls     []string
	requests  []string
	away      int
	awayDone  bool
	resets    int
	staged    *Upload // asrockrack: the image uploaded, until upgraded
	csrf      string
	// screenSent is how many bytes of the last Dell screenshot answer
	// the client took.
	screenSent int
}

// Upload is one image the fake received.
type Upload struct {
	Component string
	Bytes     []byte
}

type vendorTask struct {
	id, name, component string
	verify              bool // supermicro: the upload's verification
	state, status, msg  string
	polls               int
	image               []byte
}

// The console images the fakes start with: the formats' signatures and
// a few bytes, as a BMC's capture starts.
var (
	ScreenPNG  = append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), []byte("fake console")...)
	ScreenJPEG = append([]byte{0xff, 0xd8, 0xff, 0xe0}, []byte("JFIF fake console")...)
)

// Fake credentials.
const (
	VendorUser     = "root"
	VendorPassword = "calvin-s3cret"
)

// StartVendorBMC starts a fake of vendor ("dell", "supermicro",
// "openbmc" or "asrockrack") running bios 1.0.0 and bmc 1.00, host off.
// Binding port 443 needs root or CAP_NET_BIND_SERVICE: without them the
// test is skipped, except in CI.
func StartVendorBMC(t testing.TB, vendor string) *VendorBMC {
	t.Helper()
	f := &VendorBMC{Vendor: vendor, bios: "1.0.0", bmc: "1.00", power: "Off", sessions: map[string]bool{}, FailMessage: "Unable to verify the update package signature.", Screen: ScreenPNG}
	if vendor == "supermicro" {
		f.Screen = ScreenJPEG
	}
	var ln net.Listener
	for i := 0; ln == nil; i++ {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		addr := netip.AddrFrom4([4]byte{127, b[0] | 1, b[1], b[2] | 1}).String()
		l, err := net.Listen("tcp", net.JoinHostPort(addr, "443"))
		switch {
		case err == nil:
			ln, f.Addr = l, addr
		case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
			if os.Getenv("CI") != "" {
				t.Fatalf("vendor fake: %v", err)
			}
			t.Skipf("vendor fake: binding port 443 needs root: %v", err)
		case i > 20:
			t.Fatalf("vendor fake: %v", err)
		}
	}
	cert, pemCA := selfSigned(t, f.Addr)
	f.CAPEM = pemCA
	srv := &http.Server{Handler: http.HandlerFunc(f.serve), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return f
}

// selfSigned makes a CA certificate for addr, returned with its PEM.
func selfSigned(t testing.TB, addr string) (tls.Certificate, string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: addr},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP(addr)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// DriverInfo is a bmclib driver_info for the fake.
func (f *VendorBMC) DriverInfo() map[string]any {
	return map[string]any{"bmclib_provider": f.Vendor, "bmclib_address": f.Addr, "bmclib_username": VendorUser,
		"bmclib_password": VendorPassword, "bmclib_verify_ca": f.CAPEM}
}

// Versions are the BIOS and BMC versions the fake runs.
func (f *VendorBMC) Versions() (bios, bmc string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bios, f.bmc
}

// Uploads are the images received, oldest first.
func (f *VendorBMC) Uploads() []Upload {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Upload(nil), f.uploads...)
}

// Calls are the firmware calls the fake took, oldest first: "upload
// BIOS", "install BIOS", "power-off" (of a host that was on),
// "power-cycle", "reset-bmc", "dropped" (a connection dropped while
// away), "screenshot".
func (f *VendorBMC) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// Requests are "METHOD PATH" of every request served, oldest first.
func (f *VendorBMC) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// ScreenSent is how many bytes of its last screenshot answer the Dell
// fake could write before the client stopped reading.
func (f *VendorBMC) ScreenSent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.screenSent
}

// PowerOn turns the host on, as if someone had.
func (f *VendorBMC) PowerOn() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.power = "On"
}

// Power is the host's power, On or Off.
func (f *VendorBMC) Power() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.power
}

func (f *VendorBMC) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// bmclib's ASRockRack provider joins "https://host/" and paths that
	// start with a slash.
	path := "/" + strings.TrimLeft(r.URL.Path, "/")
	f.requests = append(f.requests, r.Method+" "+path)
	if f.away > 0 {
		// A restarting BMC: the connection drops unanswered.
		f.away--
		f.calls = append(f.calls, "dropped")
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if f.Vendor == "asrockrack" {
		f.serveASRockRack(w, r, path)
		return
	}
	if f.Vendor == "supermicro" && strings.HasPrefix(path, "/cgi/") {
		f.serveSupermicroWeb(w, r, path)
		return
	}
	f.serveRedfish(w, r, path)
}

func vjson(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v, nil) }

// The Redfish paths each vendor names its system and manager by, as
// bmclib's inventory knows them.
func (f *VendorBMC) sysPath() string {
	switch f.Vendor {
	case "dell":
		return "/redfish/v1/Systems/System.Embedded.1"
	case "openbmc":
		return "/redfish/v1/Systems/system"
	}
	return "/redfish/v1/Systems/1"
}

func (f *VendorBMC) mgrPath() string {
	switch f.Vendor {
	case "dell":
		return "/redfish/v1/Managers/iDRAC.Embedded.1"
	case "openbmc":
		return "/redfish/v1/Managers/bmc"
	}
	return "/redfish/v1/Managers/1"
}

func (f *VendorBMC) serveRedfish(w http.ResponseWriter, r *http.Request, path string) {
	path = strings.TrimSuffix(path, "/")
	switch {
	case path == "" && f.Vendor == "openbmc":
		// bmclib's OpenBMC provider recognises the BMC by its web page.
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><title>OpenBMC</title></html>")
		return
	case path == "/redfish/v1" && r.Method == http.MethodGet:
		vjson(w, 200, map[string]any{"@odata.id": "/redfish/v1/", "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot", "Id": "RootService",
			"RedfishVersion": "1.11.0", "Vendor": f.Vendor, "Systems": link("/redfish/v1/Systems"), "Managers": link("/redfish/v1/Managers"),
			"Chassis": link("/redfish/v1/Chassis"), "Tasks": link("/redfish/v1/TaskService"), "UpdateService": link("/redfish/v1/UpdateService"),
			"SessionService": link("/redfish/v1/SessionService"), "Links": map[string]any{"Sessions": link("/redfish/v1/SessionService/Sessions")}})
		return
	case path == "/redfish/v1/SessionService/Sessions" && r.Method == http.MethodPost:
		var login struct{ UserName, Password string }
		_ = json.NewDecoder(r.Body).Decode(&login)
		if login.UserName != VendorUser || login.Password != VendorPassword {
			vjson(w, 401, map[string]any{"error": map[string]any{"message": "Invalid username or password"}})
			return
		}
		token := fmt.Sprintf("tok-%d", len(f.sessions)+1)
		f.sessions[token] = true
		w.Header().Set("X-Auth-Token", token)
		w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/"+token)
		vjson(w, 201, map[string]any{"@odata.id": "/redfish/v1/SessionService/Sessions/" + token, "Id": token})
		return
	}
	if !f.sessions[r.Header.Get("X-Auth-Token")] {
		vjson(w, 401, map[string]any{"error": map[string]any{"message": "no session"}})
		return
	}
	sys, mgr := f.sysPath(), f.mgrPath()
	switch {
	case strings.HasPrefix(path, "/redfish/v1/SessionService/Sessions/") && r.Method == http.MethodDelete:
		delete(f.sessions, strings.TrimPrefix(path, "/redfish/v1/SessionService/Sessions/"))
		w.WriteHeader(204)
	case path == "/redfish/v1/Systems":
		vjson(w, 200, map[string]any{"Members": []any{link(sys)}, "Members@odata.count": 1})
	case path == sys:
		maker, model := map[string]string{"dell": "Dell Inc.", "openbmc": "ASRockRack", "supermicro": "Supermicro"}[f.Vendor], map[string]string{"dell": "PowerEdge R650", "openbmc": "ROMED8HM3", "supermicro": "SYS-510T-MR-EI018"}[f.Vendor]
		vjson(w, 200, map[string]any{"@odata.id": sys, "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem", "Id": sys[strings.LastIndex(sys, "/")+1:],
			"Manufacturer": maker, "Model": model, "SerialNumber": "FAKE0001", "BiosVersion": f.bios, "PowerState": f.power,
			"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{"target": sys + "/Actions/ComputerSystem.Reset"}}})
	case path == sys+"/Actions/ComputerSystem.Reset" && r.Method == http.MethodPost:
		var body struct{ ResetType string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.setPower(body.ResetType)
		w.WriteHeader(204)
	case path == "/redfish/v1/Dell/Managers/iDRAC.Embedded.1/DellLCService/Actions/DellLCService.ExportServerScreenShot" && f.Vendor == "dell" && r.Method == http.MethodPost:
		var body struct{ FileType string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body.FileType != "ServerScreenShot" {
			vjson(w, 400, map[string]any{"error": map[string]any{"message": "FileType " + body.FileType}})
			return
		}
		f.calls = append(f.calls, "screenshot")
		// In 1 MiB writes, counting those the client took, so a test
		// sees how much of a large answer was read.
		b, _ := json.Marshal(map[string]any{"ServerScreenshotFile": base64.StdEncoding.EncodeToString(f.Screen)})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		f.screenSent = 0
		for len(b) > 0 {
			n := min(len(b), 1<<20)
			if _, err := w.Write(b[:n]); err != nil {
				break
			}
			f.screenSent += n
			b = b[n:]
		}
	case path == "/redfish/v1/Managers":
		vjson(w, 200, map[string]any{"Members": []any{link(mgr)}, "Members@odata.count": 1})
	case path == mgr:
		vjson(w, 200, map[string]any{"@odata.id": mgr, "@odata.type": "#Manager.v1_10_0.Manager", "Id": mgr[strings.LastIndex(mgr, "/")+1:],
			"ManagerType": "BMC", "FirmwareVersion": f.bmc, "Status": map[string]string{"Health": "OK", "State": "Enabled"},
			"Actions": map[string]any{"#Manager.Reset": map[string]any{"target": mgr + "/Actions/Manager.Reset"}}})
	case path == mgr+"/Actions/Manager.Reset" && r.Method == http.MethodPost:
		f.calls = append(f.calls, "reset-bmc")
		f.resets++
		w.WriteHeader(204)
	case path == "/redfish/v1/Chassis", path == "/redfish/v1/UpdateService/FirmwareInventory":
		vjson(w, 200, map[string]any{"Members": []any{}, "Members@odata.count": 0})
	case path == "/redfish/v1/UpdateService":
		vjson(w, 200, map[string]any{"@odata.id": path, "@odata.type": "#UpdateService.v1_8_0.UpdateService", "Id": "UpdateService", "ServiceEnabled": true,
			"MultipartHttpPushUri": "/redfish/v1/UpdateService/update-multipart", "FirmwareInventory": link("/redfish/v1/UpdateService/FirmwareInventory")})
	case path == "/redfish/v1/UpdateService/update-multipart" && r.Method == http.MethodPost:
		f.multipartPush(w, r)
	case path == "/redfish/v1/UpdateService/Actions/UpdateService.StartUpdate" && r.Method == http.MethodPost:
		f.startUpdate(w)
	case path == "/redfish/v1/TaskService":
		vjson(w, 200, map[string]any{"@odata.id": path, "@odata.type": "#TaskService.v1_1_4.TaskService", "Id": "TaskService", "Tasks": link("/redfish/v1/TaskService/Tasks")})
	case path == "/redfish/v1/TaskService/Tasks":
		var members []any
		for _, t := range f.tasks {
			members = append(members, link("/redfish/v1/TaskService/Tasks/"+t.id))
		}
		vjson(w, 200, map[string]any{"Members": members, "Members@odata.count": len(members)})
	case strings.HasPrefix(path, "/redfish/v1/TaskService/Tasks/"):
		id := strings.TrimSuffix(strings.TrimPrefix(path, "/redfish/v1/TaskService/Tasks/"), "/Monitor")
		for _, t := range f.tasks {
			if t.id == id {
				vjson(w, 200, f.taskJSON(t))
				return
			}
		}
		vjson(w, 404, map[string]any{"error": map[string]any{"message": "no such task"}})
	default:
		vjson(w, 404, map[string]any{"error": map[string]any{"message": "not found: " + path}})
	}
}

// setPower applies a reset. A host that boots (on from off, or a
// restart) runs the jobs scheduled for its next boot: that is the power
// cycle a task waiting for one goes on after.
func (f *VendorBMC) setPower(kind string) {
	boots := false
	switch kind {
	case "On", "ForceOn":
		boots = f.power == "Off"
		f.power = "On"
	case "ForceOff", "GracefulShutdown":
		if f.power == "On" {
			f.calls = append(f.calls, "power-off")
		}
		f.power = "Off"
	case "ForceRestart", "GracefulRestart", "PowerCycle":
		boots, f.power = true, "On"
	}
	if !boots {
		return
	}
	for _, t := range f.tasks {
		if t.state == "Scheduled" {
			t.state = "Running"
			f.calls = append(f.calls, "power-cycle")
		}
	}
}

// multipartPush takes bmclib's UpdateParameters and UpdateFile parts.
func (f *VendorBMC) multipartPush(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(64 << 20); err != nil {
		vjson(w, 400, map[string]any{"error": map[string]any{"message": err.Error()}})
		return
	}
	var params struct {
		Targets []string
		Apply   string `json:"@Redfish.OperationApplyTime"`
	}
	if err := json.Unmarshal([]byte(r.FormValue("UpdateParameters")), &params); err != nil {
		vjson(w, 400, map[string]any{"error": map[string]any{"message": "UpdateParameters: " + err.Error()}})
		return
	}
	file, _, err := r.FormFile("UpdateFile")
	if err != nil {
		vjson(w, 400, map[string]any{"error": map[string]any{"message": "UpdateFile: " + err.Error()}})
		return
	}
	image, _ := io.ReadAll(file)
	// Which component: Supermicro names its target; Dell and OpenBMC
	// find it in the image, here its first word.
	component := strings.ToUpper(strings.Fields(string(image) + " BIOS")[0])
	for _, tg := range params.Targets {
		if tg == f.mgrPath() {
			component = "BMC"
		} else if strings.HasSuffix(tg, "/Bios") {
			component = "BIOS"
		}
	}
	f.uploads = append(f.uploads, Upload{Component: component, Bytes: image})
	f.calls = append(f.calls, "upload "+component)
	t := &vendorTask{component: component, image: image, state: "Running", status: "OK"}
	switch f.Vendor {
	case "dell":
		t.id = fmt.Sprintf("JID_%09d", len(f.tasks)+1)
		t.name = map[string]string{"BIOS": "Firmware Update: BIOS", "BMC": "Firmware Update: iDRAC with Lifecycle Controller"}[component]
		f.calls = append(f.calls, "install "+component)
		if f.PowerCycle {
			t.state = "Scheduled"
		}
	case "supermicro":
		t.id, t.verify = fmt.Sprint(len(f.tasks)+1), true
		t.name = map[string]string{"BIOS": "BIOS Verify", "BMC": "BMC Verify"}[component]
	default:
		t.id, t.name = fmt.Sprint(len(f.tasks)+1), "Firmware Update"
		f.calls = append(f.calls, "install "+component)
	}
	f.tasks = append(f.tasks, t)
	loc := "/redfish/v1/TaskService/Tasks/" + t.id
	if f.Vendor == "openbmc" {
		loc += "/Monitor"
	}
	w.Header().Set("Location", loc)
	vjson(w, 202, map[string]any{"@odata.id": loc, "@odata.type": "#Task.v1_4_3.Task", "Id": t.id})
}

// startUpdate installs the image the last verified upload holds
// (Supermicro X12).
func (f *VendorBMC) startUpdate(w http.ResponseWriter) {
	var up *vendorTask
	for _, t := range f.tasks {
		if t.verify && t.state == "Completed" {
			up = t
		}
	}
	if up == nil {
		vjson(w, 400, map[string]any{"error": map[string]any{"message": "no verified firmware to update"}})
		return
	}
	f.calls = append(f.calls, "install "+up.component)
	t := &vendorTask{id: fmt.Sprint(len(f.tasks) + 1), name: up.component + " Update", component: up.component, image: up.image, state: "Running", status: "OK"}
	up.verify = false
	f.tasks = append(f.tasks, t)
	w.Header().Set("Location", "/redfish/v1/TaskService/Tasks/"+t.id)
	vjson(w, 202, map[string]any{"@odata.id": "/redfish/v1/TaskService/Tasks/" + t.id, "@odata.type": "#Task.v1_4_3.Task", "Id": t.id})
}

// advance moves a task on by one poll: a verification completes at once,
// an install after two polls (the BMC away in between when AwayPolls is
// set), completing (the version bumped) or failing as configured.
func (f *VendorBMC) advance(t *vendorTask) {
	if t.state != "Running" {
		return
	}
	t.polls++
	if t.verify {
		t.state = "Completed"
		return
	}
	if f.AwayPolls > 0 && !f.awayDone {
		f.awayDone, f.away = true, f.AwayPolls
		return
	}
	if t.polls < 3 {
		return
	}
	if f.Fail {
		t.state, t.status, t.msg = "Exception", "Critical", f.FailMessage
		return
	}
	t.state, t.msg = "Completed", "The update completed."
	f.bump(t.component)
}

func (f *VendorBMC) bump(component string) {
	if component == "BMC" {
		f.bmc = "1.01"
	} else {
		f.bios = "1.0.1"
	}
}

func (f *VendorBMC) taskJSON(t *vendorTask) map[string]any {
	f.advance(t)
	pct := map[string]int{"Scheduled": 0, "Running": 50, "Completed": 100, "Exception": 100}[t.state]
	out := map[string]any{"@odata.id": "/redfish/v1/TaskService/Tasks/" + t.id, "@odata.type": "#Task.v1_4_3.Task", "Id": t.id, "Name": t.name,
		"TaskState": t.state, "TaskStatus": t.status, "PercentComplete": pct}
	if t.msg != "" {
		out["Messages"] = []any{map[string]any{"Message": t.msg}}
	}
	if f.Vendor == "dell" {
		// iDRAC's job, which bmclib's Dell provider reads the state from.
		job := map[string]string{"Scheduled": "Scheduled", "Running": "Running", "Completed": "Completed", "Exception": "Failed"}[t.state]
		out["TaskState"] = map[string]string{"Scheduled": "Starting"}[t.state]
		if out["TaskState"] == "" {
			out["TaskState"] = t.state
		}
		out["Oem"] = map[string]any{"Dell": map[string]any{"@odata.type": "#DellJob.v1_4_0.DellJob", "Id": t.id, "JobState": job, "JobType": "FirmwareUpdate",
			"Description": "Job Instance", "Message": cmpOr(t.msg, "Task successfully scheduled."), "PercentComplete": pct, "Name": t.name}}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// serveSupermicroWeb answers the web session bmclib's Supermicro
// provider opens before Redfish: login.cgi (base64 credentials first),
// the top menu carrying the CSRF token, and the X11 XML API, which an
// X12 lacks (404).
func (f *VendorBMC) serveSupermicroWeb(w http.ResponseWriter, r *http.Request, path string) {
	switch {
	case path == "/cgi/login.cgi" && r.Method == http.MethodPost:
		_ = r.ParseForm()
		user, _ := base64.StdEncoding.DecodeString(r.PostForm.Get("name"))
		pass, _ := base64.StdEncoding.DecodeString(r.PostForm.Get("pwd"))
		if string(user) != VendorUser || string(pass) != VendorPassword {
			_, _ = io.WriteString(w, "<html>ERROR: wrong user name or password</html>")
			return
		}
		f.csrf = "smc-csrf-token-1"
		http.SetCookie(w, &http.Cookie{Name: "SID", Value: "smc-session"})
		_, _ = io.WriteString(w, `<html><script>self.location="../cgi/url_redirect.cgi?url_name=topmenu";</script></html>`)
	case path == "/cgi/op.cgi" && r.Method == http.MethodPost && f.csrf != "":
		_ = r.ParseForm()
		if r.PostForm.Get("op") != "sys_preview" {
			http.NotFound(w, r)
			return
		}
		f.calls = append(f.calls, "screenshot")
		_, _ = io.WriteString(w, `<?xml version="1.0"?><IPMI><SYS_PREVIEW RES="1"/></IPMI>`)
	case path == "/cgi/url_redirect.cgi" && r.URL.Query().Get("url_name") == "Snapshot" && f.csrf != "":
		w.Header().Set("Content-Type", "image/jpeg")
		_, _ = w.Write(f.Screen)
	case path == "/cgi/url_redirect.cgi" && f.csrf != "":
		_, _ = fmt.Fprintf(w, `<html><script>SmcCsrfInsert ("CSRF_TOKEN", "%s");</script></html>`, f.csrf)
	case path == "/cgi/logout.cgi":
		f.csrf = ""
		_, _ = io.WriteString(w, "<html>logged out</html>")
	default:
		// X12 has no ipmi.cgi XML API.
		http.NotFound(w, r)
	}
}

// serveASRockRack answers bmclib's ASRockRack provider (an E3C256D4ID-NL).
func (f *VendorBMC) serveASRockRack(w http.ResponseWriter, r *http.Request, path string) {
	if path == "/api/session" && r.Method == http.MethodPost {
		_ = r.ParseForm()
		if r.PostForm.Get("username") != VendorUser || r.PostForm.Get("password") != VendorPassword {
			vjson(w, 401, map[string]any{"cc": 1})
			return
		}
		f.csrf = fmt.Sprintf("asr-csrf-%d", len(f.requests))
		vjson(w, 200, map[string]any{"ok": 0, "privilege": 4, "extendedpriv": 259, "racsession_id": 7, "csrftoken": f.csrf})
		return
	}
	if f.csrf == "" || r.Header.Get("X-CSRFTOKEN") != f.csrf {
		vjson(w, 401, map[string]any{"cc": 1, "error": "invalid session"})
		return
	}
	switch {
	case path == "/api/session" && r.Method == http.MethodDelete:
		f.csrf = ""
		vjson(w, 200, map[string]any{"ok": 0})
	case path == "/api/fru":
		vjson(w, 200, []any{map[string]any{
			"board":   map[string]any{"manufacturer": "ASRockRack", "product_name": "E3C256D4ID-NL", "serial_number": "FAKE0001"},
			"product": map[string]any{"manufacturer": "ASRockRack", "product_name": "anvil-fake", "product_version": "R1.00"},
			"chassis": map[string]any{"type": "Main Server Chassis", "serial_number": "FAKECH01"}}})
	case path == "/api/asrr/fw-info":
		vjson(w, 200, map[string]any{"BMC_fw_version": f.bmc, "BIOS_fw_version": f.bios, "ME_fw_version": "5.1", "CPLD_version": "N/A", "Node_id": "0"})
	case path == "/api/asrr/getbioscode":
		// 0xA0: the host handed over to its boot loader.
		vjson(w, 200, map[string]any{"poststatus": 1, "postdata": 160})
	case path == "/api/sensors":
		vjson(w, 200, []any{})
	case path == "/api/chassis-status":
		vjson(w, 200, map[string]any{"power_status": map[string]int{"On": 1}[f.power], "led_status": 0})
	case path == "/api/maintenance/flash" && r.Method == http.MethodPut:
		f.calls = append(f.calls, "flash-mode")
		vjson(w, 200, map[string]any{"ok": 0})
	case path == "/api/maintenance/firmware/firmware" && r.Method == http.MethodPost:
		if err := r.ParseMultipartForm(64 << 20); err != nil {
			vjson(w, 400, map[string]any{"error": err.Error()})
			return
		}
		file, _, err := r.FormFile("fwimage")
		if err != nil {
			vjson(w, 400, map[string]any{"error": err.Error()})
			return
		}
		image, _ := io.ReadAll(file)
		f.staged = &Upload{Component: "BMC", Bytes: image}
		f.uploads = append(f.uploads, *f.staged)
		f.calls = append(f.calls, "upload BMC")
		vjson(w, 200, map[string]any{"cc": 0})
	case path == "/api/maintenance/firmware/verification":
		if f.staged == nil {
			vjson(w, 500, map[string]any{"error": "no image"})
			return
		}
		vjson(w, 200, []any{map[string]any{"id": 1, "current_image_name": "BMC", "current_image_version1": f.bmc, "new_image_version": "1.01", "section_status": 0, "verification_status": 0}})
	case path == "/api/maintenance/firmware/upgrade" && r.Method == http.MethodPut:
		f.calls = append(f.calls, "install BMC")
		f.tasks = append(f.tasks, &vendorTask{id: "1", component: "BMC", state: "Running"})
		vjson(w, 200, map[string]any{"ok": 0})
	case path == "/api/maintenance/firmware/flash-progress":
		if len(f.tasks) == 0 {
			vjson(w, 200, map[string]any{"id": 1, "action": "Flashing...", "progress": "0% done", "state": 1})
			return
		}
		t := f.tasks[len(f.tasks)-1]
		f.advance(t)
		state, progress := 0, "50% done"
		if t.state == "Completed" {
			state, progress = 2, "100% done"
		}
		vjson(w, 200, map[string]any{"id": 1, "action": "Flashing...", "progress": progress, "state": state})
	case path == "/api/maintenance/reset" && r.Method == http.MethodPost:
		f.calls = append(f.calls, "reset-bmc")
		f.resets++
		vjson(w, 200, map[string]any{"ok": 0})
	default:
		vjson(w, 404, map[string]any{"error": "not found: " + path})
	}
}
