package api_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestHardwareStateStored: what a redfish-sim BMC last accepted or
// reported of its virtual media and indicators is kept in the node's
// driver_internal_info (vmedia, indicators), the portal's only source for
// them: an API attach, a read, a detach, the management steps, an
// indicator set and read. An image URL's password is never stored,
// audited or written to history.
func TestHardwareStateStored(t *testing.T) {
	iso := servertest.ServeISO(t)
	secret := strings.Replace(iso, "http://", "http://anvil:s3cret-pw@", 1)
	shown := strings.Replace(iso, "http://", "http://***@", 1)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "hws-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		internal := func(key string) map[string]any {
			t.Helper()
			r := admin.Do(t, "GET", "/v1/nodes/"+id, nil)
			mustStatus(t, r, 200)
			if strings.Contains(string(r.Body), "s3cret-pw") {
				t.Errorf("the node shows the image URL's password: %s", r.Body)
			}
			m, _ := r.JSON(t)["driver_internal_info"].(map[string]any)[key].(map[string]any)
			return m
		}
		// devices is the stored media as "device=url@since" and when it
		// was learned.
		devices := func() ([]string, time.Time) {
			t.Helper()
			v := internal("vmedia")
			if v == nil {
				t.Fatalf("no vmedia in driver_internal_info")
			}
			at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(v["at"]))
			if err != nil {
				t.Fatalf("vmedia at: %v", err)
			}
			var out []string
			for _, x := range v["devices"].([]any) {
				d := x.(map[string]any)
				out = append(out, fmt.Sprintf("%v=%v@%v", d["device_type"], d["image_url"], d["since"]))
			}
			return out, at
		}
		if v := internal("vmedia"); v != nil {
			t.Errorf("vmedia stored before any was attached: %v", v)
		}

		path := "/v1/nodes/" + id + "/vmedia"
		before := time.Now()
		mustStatus(t, admin.Do(t, "POST", path, map[string]any{"device_type": "cdrom", "image_url": secret}), 204)
		vmediaSettled(t, admin, id)
		got, at := devices()
		if len(got) != 1 || !strings.HasPrefix(got[0], "cdrom="+shown+"@") || at.Before(before.Add(-time.Second)) {
			t.Fatalf("after attach: %v at %v", got, at)
		}
		attached := got[0]
		// The BMC had the password: only Anvil's records go without it.
		if m := sim.Resource(t, sim.SystemPath("1")+"/VirtualMedia/Cd"); m["Image"] != secret {
			t.Errorf("simulator image %v, want %s", m["Image"], secret)
		}
		for _, q := range []string{"/v1/nodes/" + id + "/history", "/v1/events?rule=baremetal:node:vmedia:attach"} {
			r := admin.Do(t, "GET", q, nil)
			mustStatus(t, r, 200)
			if strings.Contains(string(r.Body), "s3cret-pw") || !strings.Contains(string(r.Body), shown) {
				t.Errorf("%s has the password or lacks the shown URL: %s", q, r.Body)
			}
		}

		// A read refreshes when it was learned and keeps since when.
		mustStatus(t, atVer(clients["lessee-reader"], api.VerMax).Do(t, "GET", path, nil), 200)
		if got, at2 := devices(); len(got) != 1 || got[0] != attached || !at2.After(at) {
			t.Errorf("after read: %v at %v (attach at %v)", got, at2, at)
		}
		mustStatus(t, admin.Do(t, "DELETE", path+"?device_types=cdrom", nil), 204)
		vmediaSettled(t, admin, id)
		if got, _ := devices(); len(got) != 0 {
			t.Errorf("after detach: %v", got)
		}

		// The steps record theirs, and the run's own writes of
		// driver_internal_info keep it.
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(
			step("management", "attach_virtual_media", map[string]any{"device_type": "cdrom", "image_url": iso}),
			step("management", "set_boot_mode", map[string]any{"mode": "uefi"}))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("attach step: %v", n["last_error"])
		}
		if got, _ := devices(); len(got) != 1 || !strings.HasPrefix(got[0], "cdrom="+iso+"@") {
			t.Errorf("after the attach step: %v", got)
		}
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("management", "detach_virtual_media", nil))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("detach step: %v", n["last_error"])
		}
		if got, _ := devices(); len(got) != 0 {
			t.Errorf("after the detach step: %v", got)
		}

		// Indicators: a set records the state accepted, a read every
		// state reported.
		system := sim.Resource(t, sim.SystemPath("1"))
		chassisPath := system["Links"].(map[string]any)["Chassis"].([]any)[0].(map[string]any)["@odata.id"].(string)
		sysLED, chLED := fmt.Sprint(system["UUID"], "@system"), fmt.Sprint(sim.Resource(t, chassisPath)["UUID"], "@chassis")
		base := "/v1/nodes/" + id + "/management/indicators"
		state := func(name string) any {
			m, _ := internal("indicators")[name].(map[string]any)
			return m["state"]
		}
		if l := internal("indicators"); l != nil {
			t.Errorf("indicators stored before any was read: %v", l)
		}
		mustStatus(t, atVer(clients["owner-member"], api.VerMax).Do(t, "PUT", base+"/"+sysLED, map[string]any{"state": "blinking"}), 204)
		if s, c := state(sysLED), state(chLED); s != "blinking" || c != nil {
			t.Errorf("after set: system %v chassis %v", s, c)
		}
		mustStatus(t, atVer(clients["lessee-reader"], api.VerMax).Do(t, "GET", base, nil), 200)
		if s, c := state(sysLED), state(chLED); s != "blinking" || c != "on" {
			t.Errorf("after read: system %v chassis %v", s, c)
		}
	})
}
