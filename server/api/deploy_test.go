package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func TestDeployStateMachine(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "dep-1", "driver": "fake-hardware", "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		if v := admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil).JSON(t)["deploy"].(map[string]any); v["result"] != true {
			t.Errorf("validate deploy on fake-hardware: %v", v)
		}
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		waitState(t, admin, id, "available")

		// Verbs that need a deployed node name the state they met.
		for _, verb := range []string{"rebuild", "deleted", "undeploy"} {
			if f := provision(t, admin, id, map[string]any{"target": verb}, 409).Fault(t); !strings.Contains(f, `"available"`) {
				t.Errorf("%s: 409 fault %q does not name the state", verb, f)
			}
		}
		// Bad requests are refused before anything changes.
		for _, bad := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"target": "deleted", "configdrive": "aGVsbG8="}, "config drive"},
			{map[string]any{"target": "active", "configdrive": "not base64!"}, "configdrive format"},
			{map[string]any{"target": "active", "configdrive": map[string]any{"user_data": "x", "password": "y"}}, "password"},
			{map[string]any{"target": "active", "configdrive": 7}, "configdrive"},
			{map[string]any{"target": "active", "deploy_steps": steps(step("power", "power_on", nil))}, "priority"},
			{map[string]any{"target": "active", "deploy_steps": []any{map[string]any{"interface": "deploy", "step": "erase_devices", "priority": 90}}}, "runs in the ramdisk agent"},
			{map[string]any{"target": "deleted", "deploy_steps": []any{map[string]any{"interface": "power", "step": "power_on", "priority": 90}}}, "deploy_steps"},
		} {
			if f := provision(t, admin, id, bad.body, 400).Fault(t); !strings.Contains(f, bad.field) {
				t.Errorf("%v: fault %q does not mention %s", bad.body, f, bad.field)
			}
		}
		old := admin.Version
		admin.Version = "1.72"
		provision(t, admin, id, map[string]any{"target": "deploy"}, 406)
		admin.Version = old

		// set_provision_state decides who deploys: not an owner reader or
		// a lessee member; another project does not see the node at all.
		deploy := map[string]any{"target": "active", "configdrive": "aGVsbG8=",
			"deploy_steps": []any{map[string]any{"interface": "power", "step": "power_off", "priority": 150}}}
		provision(t, clients["owner-reader"], id, deploy, 403)
		provision(t, clients["lessee-member"], id, deploy, 403)
		provision(t, clients["other-admin"], id, deploy, 404)
		// deploy_steps need set_provision_state:deploy_steps (system
		// members): the owner's member deploys, but not with extra steps.
		provision(t, clients["owner-member"], id, deploy, 403)
		provision(t, clients["system-member"], id, deploy, 202)
		n := waitState(t, admin, id, "active")
		if n["power_state"] != "power on" || n["last_error"] != nil {
			t.Errorf("after deploy: power %v, last_error %v", n["power_state"], n["last_error"])
		}
		if cd := n["instance_info"].(map[string]any)["configdrive"]; cd != "******" {
			t.Errorf("configdrive reads back as %v, want it masked", cd)
		}
		if got := stepsStarted(t, admin, id); got != "power.power_off,deploy.deploy" {
			t.Errorf("deploy ran %s", got)
		}

		provision(t, admin, id, map[string]any{"target": "active"}, 409)
		provision(t, clients["lessee-admin"], id, map[string]any{"target": "rebuild"}, 202)
		n = waitState(t, admin, id, "active")
		if n["power_state"] != "power on" {
			t.Errorf("after rebuild: power %v", n["power_state"])
		}

		provision(t, clients["owner-member"], id, map[string]any{"target": "undeploy"}, 202)
		n = waitState(t, admin, id, "available")
		if n["power_state"] != "power off" || len(n["instance_info"].(map[string]any)) != 0 || n["instance_uuid"] != nil {
			t.Errorf("after undeploy: power %v, instance_info %v, instance_uuid %v", n["power_state"], n["instance_info"], n["instance_uuid"])
		}
		hist := eventsOf(t, admin, id)
		for _, want := range []string{"deploy: Step deploy.deploy started", "deploy: All 2 deploy steps done; node is active",
			"deploy: Instance torn down", "clean: No clean steps to run; node is available"} {
			if !strings.Contains(hist, want) {
				t.Errorf("history lacks %q:\n%s", want, hist)
			}
		}
	})
}

// eventsOf is a node's history as "type: event" lines, oldest first.
func eventsOf(t *testing.T, c *servertest.Client, id string) string {
	t.Helper()
	r := c.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
	mustStatus(t, r, 200)
	var lines []string
	for _, e := range r.JSON(t)["history"].([]any) {
		m := e.(map[string]any)
		lines = append(lines, fmt.Sprintf("%v: %v", m["event_type"], m["event"]))
	}
	return strings.Join(lines, "\n")
}

// stepsStarted lists the steps of the node's latest deployment in the
// order they started.
func stepsStarted(t *testing.T, c *servertest.Client, id string) string {
	t.Helper()
	var started []string
	for _, line := range strings.Split(eventsOf(t, c, id), "\n") {
		if strings.HasPrefix(line, "deploy: Step ") && strings.Contains(line, "started (1 of") {
			started = nil
		}
		if rest, ok := strings.CutPrefix(line, "deploy: Step "); ok && strings.Contains(rest, "started") {
			started = append(started, strings.Fields(rest)[0])
		}
	}
	return strings.Join(started, ",")
}

// TestDeployNeedsAWayToWriteAnImage: a driver without one is a 400 at
// request time naming what is missing, before any BMC is asked.
func TestDeployNeedsAWayToWriteAnImage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		ipmi := map[string]any{"ipmi_address": "192.0.2.9", "ipmi_username": "root", "ipmi_password": "pw"}
		redfish := map[string]any{"redfish_address": "https://192.0.2.9", "redfish_username": "u", "redfish_password": "p"}
		for _, c := range []struct {
			driver string
			info   map[string]any
			image  string
			fields map[string]any // interfaces
			want   []string
		}{
			{"ipmi", ipmi, "", nil, []string{"instance_info.image_source", "not set"}},
			{"ipmi", ipmi, "image_source", nil, []string{"ramdisk agent"}},
			// direct is what it says on every driver: no image, no deploy.
			{"redfish", redfish, "", nil, []string{"direct deploy", "instance_info.image_source", "deploy_interface ramdisk"}},
			{"redfish", redfish, "boot_iso", nil, []string{"direct deploy", "instance_info.image_source"}},
			// ramdisk boots boot_iso by virtual media, and says so.
			{"redfish", redfish, "", map[string]any{"deploy_interface": "ramdisk", "boot_interface": "redfish-virtual-media"}, []string{"instance_info.boot_iso"}},
			{"redfish", redfish, "boot_iso", map[string]any{"deploy_interface": "ramdisk"}, []string{"boot_interface is ipxe", "redfish-virtual-media"}},
			{"ipmi", ipmi, "boot_iso", map[string]any{"deploy_interface": "ramdisk"}, []string{"virtual media", "driver ipmi"}},
		} {
			body := map[string]any{"driver": c.driver, "driver_info": c.info}
			for k, v := range c.fields {
				body[k] = v
			}
			if c.image != "" {
				body["instance_info"] = map[string]any{c.image: "http://192.0.2.1/img.qcow2"}
			}
			r := admin.Do(t, "POST", "/v1/nodes", body)
			mustStatus(t, r, 201)
			id := r.JSON(t)["uuid"].(string)
			f := provision(t, admin, id, map[string]any{"target": "active"}, 400).Fault(t)
			// validate's deploy interface gives the same reason.
			if v := admin.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil).JSON(t)["deploy"].(map[string]any); v["result"] != false || v["reason"] != f {
				t.Errorf("%s %s: validate deploy %v, want false with %q", c.driver, c.image, v, f)
			}
			for _, w := range c.want {
				if !strings.Contains(f, w) {
					t.Errorf("%s %s: fault %q lacks %q", c.driver, c.image, f, w)
				}
			}
			if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["provision_state"] != "enroll" || n["last_error"] != nil {
				t.Errorf("a refused deploy changed the node: %v, %v", n["provision_state"], n["last_error"])
			}
		}
	})
}

// TestRedfishISODeploy: Ironic's ramdisk deploy by virtual media against
// redfish-sim, which downloads the ISO on insert.
func TestRedfishISODeploy(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "boot.iso"), make([]byte, 65536), 0o644); err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer web.Close()
	iso := web.URL + "/boot.iso"
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		// The simulated system has no agent to boot, so its cleaning could
		// not wipe it (and would fail closed): this test opts out.
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "iso-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own",
			"deploy_interface": "ramdisk", "boot_interface": "redfish-virtual-media", "automated_clean": false})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		waitState(t, admin, id, "available")
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []any{map[string]any{"op": "add", "path": "/instance_info/boot_iso", "value": iso}}), 200)

		provision(t, clients["owner-member"], id, map[string]any{"target": "active"}, 202)
		n := waitState(t, admin, id, "active")
		if n["power_state"] != "power on" || n["last_error"] != nil {
			t.Fatalf("after ISO deploy: power %v, last_error %v", n["power_state"], n["last_error"])
		}
		if image, inserted := sim.CD(t, "1"); image != iso || !inserted {
			t.Errorf("the BMC's CD holds %q (inserted %v), want %s", image, inserted, iso)
		}
		// The simulator reports every override as Continuous (sushy's
		// way), so the one-time request is read from what Anvil sent.
		if target, _, _ := sim.Boot(t, "1"); target != "Cd" {
			t.Errorf("boot override %s, want Cd", target)
		}
		once := false
		for _, b := range sim.Bodies(t) {
			once = once || strings.Contains(b, `"BootSourceOverrideTarget":"Cd"`) && strings.Contains(b, `"Once"`)
		}
		if !once {
			t.Error("no one-time boot from Cd was sent")
		}
		if sim.Power(t, "1") != "On" {
			t.Error("the BMC reports the system off after deploy")
		}

		provision(t, clients["owner-member"], id, map[string]any{"target": "deleted"}, 202)
		n = waitState(t, admin, id, "available")
		if n["power_state"] != "power off" || len(n["instance_info"].(map[string]any)) != 0 {
			t.Errorf("after undeploy: power %v, instance_info %v", n["power_state"], n["instance_info"])
		}
		if _, inserted := sim.CD(t, "1"); inserted {
			t.Error("the CD is still inserted after undeploy")
		}
		if sim.Power(t, "1") != "Off" {
			t.Error("the BMC reports the system on after undeploy")
		}
	})
}

// TestDeployWaitAndHold: deploy steps wait in wait call-back and hold in
// deploy hold as Ironic's states do; abort of a wait needs 1.110.
func TestDeployWaitAndHold(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "dep-w", "driver": "fake-hardware"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "provide"}, 202)
		waitState(t, admin, id, "available")

		wait := []any{map[string]any{"interface": "deploy", "step": "wait", "args": map[string]any{"seconds": 2}, "priority": 150}}
		provision(t, admin, id, map[string]any{"target": "active", "deploy_steps": wait}, 202)
		deadline := time.Now().Add(10 * time.Second)
		for admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["provision_state"] != "wait call-back" {
			if time.Now().After(deadline) {
				t.Fatal("never reached wait call-back")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if f := provision(t, at(admin, "1.109"), id, map[string]any{"target": "abort"}, 406).Fault(t); !strings.Contains(f, "1.110") {
			t.Errorf("abort of wait call-back at 1.109: %s", f)
		}
		waitState(t, admin, id, "active")
		// From 1.110 abort ends the wait: deploy failed, as Ironic.
		long := []any{map[string]any{"interface": "deploy", "step": "wait", "args": map[string]any{"seconds": 60}, "priority": 150}}
		provision(t, admin, id, map[string]any{"target": "rebuild", "deploy_steps": long}, 202)
		for deadline := time.Now().Add(10 * time.Second); admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)["provision_state"] != "wait call-back"; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the rebuild never reached wait call-back")
			}
		}
		provision(t, at(admin, "1.110"), id, map[string]any{"target": "abort"}, 202)
		waitState(t, admin, id, "deploy failed")
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		waitState(t, admin, id, "active")

		provision(t, admin, id, map[string]any{"target": "rebuild", "deploy_steps": []any{map[string]any{"interface": "deploy", "step": "hold", "priority": 150}}}, 202)
		waitState(t, admin, id, "deploy hold")
		provision(t, admin, id, map[string]any{"target": "unhold"}, 202)
		if n := waitState(t, admin, id, "active"); n["power_state"] != "power on" {
			t.Errorf("after unhold: power %v", n["power_state"])
		}
		provision(t, admin, id, map[string]any{"target": "rebuild", "deploy_steps": []any{map[string]any{"interface": "deploy", "step": "hold", "priority": 150}}}, 202)
		waitState(t, admin, id, "deploy hold")
		provision(t, admin, id, map[string]any{"target": "abort"}, 202)
		waitState(t, admin, id, "deploy failed")
		provision(t, admin, id, map[string]any{"target": "deleted"}, 202)
		waitState(t, admin, id, "available")
	})
}

// TestDeployChecksImageSource: a direct deploy asks the image server for
// instance_info.image_source with a HEAD before it starts, as Ironic's
// validate_href does, and refuses with a 400 naming the server's answer
// (or why there was none) and never the URL's credentials, leaving the
// node as it was; an image that answers 200, through a redirect too,
// deploys.
func TestDeployChecksImageSource(t *testing.T) {
	var mu sync.Mutex
	var heads []string
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		heads = append(heads, r.Method+" "+r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/img.raw":
			w.Header().Set("Content-Length", "1048576")
			w.WriteHeader(200)
		case "/moved.raw":
			http.Redirect(w, r, "/img.raw", http.StatusFound)
		case "/private.raw":
			w.WriteHeader(http.StatusForbidden)
		default:
			http.NotFound(w, r)
		}
	}))
	defer images.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		srv, clients := startLocal(t, setting, bmcOpts)
		admin := clients["system-admin"]
		sim := bmctest.StartRedfish(t)
		info := sim.DriverInfo("1")
		info["deploy_iso"] = servertest.ServeISO(t)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "driver_info": info, "boot_interface": "redfish-virtual-media"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		setState(t, srv, id, "available")
		withImage := func(src string) {
			t.Helper()
			mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info",
				"value": map[string]any{"image_source": src, "image_os_hash_algo": "sha256", "image_os_hash_value": strings.Repeat("ab", 32)}}}), 200)
		}
		u, _ := url.Parse(images.URL)
		for _, c := range []struct{ src, want string }{
			{images.URL + "/gone.raw", "answered 404 Not Found"},
			{"http://anvil:s3cret@" + u.Host + "/private.raw", "answered 403 Forbidden"},
			{closed.URL + "/img.raw", "could not be reached"},
		} {
			withImage(c.src)
			mu.Lock()
			before := len(heads)
			mu.Unlock()
			f := provision(t, admin, id, map[string]any{"target": "active"}, 400).Fault(t)
			if !strings.Contains(f, c.want) || !strings.Contains(f, "instance_info.image_source") || strings.Contains(f, "s3cret") {
				t.Errorf("%s: fault %q, want it to name instance_info.image_source and say %q, without the password", c.src, f, c.want)
			}
			mu.Lock()
			asked := heads[before:]
			mu.Unlock()
			if c.src != closed.URL+"/img.raw" && (len(asked) != 1 || !strings.HasPrefix(asked[0], "HEAD ")) {
				t.Errorf("%s: the image server saw %v, want one HEAD", c.src, asked)
			}
			if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["provision_state"] != "available" || n["last_error"] != nil {
				t.Errorf("%s: a refused deploy changed the node: %v, %v", c.src, n["provision_state"], n["last_error"])
			}
		}
		refused := 0
		for _, e := range admin.Do(t, "GET", "/v1/events?rule=baremetal:node:set_provision_state", nil).JSON(t)["events"].([]any) {
			if ev := e.(map[string]any); ev["target_id"] == id && ev["status"] == float64(400) {
				refused++
			}
		}
		if refused != 3 {
			t.Errorf("%d refused deploys audited, want 3", refused)
		}
		withImage(images.URL + "/moved.raw")
		provision(t, admin, id, map[string]any{"target": "active"}, 202)
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(heads, "HEAD /img.raw") {
			t.Errorf("the redirect was not followed: %v", heads)
		}
	})
}
