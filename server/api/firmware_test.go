package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/firmwarecomponent"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// The tests below ask at a feature's own version for the behaviour and
// one version below it for Ironic's 404.
func atVer(c *servertest.Client, v api.Version) *servertest.Client {
	cp := *c
	cp.Version = v.String()
	return &cp
}

// firmwareBy maps a node's firmware listing by component.
func firmwareBy(t *testing.T, c *servertest.Client, id string) map[string]map[string]any {
	t.Helper()
	r := c.Do(t, "GET", "/v1/nodes/"+id+"/firmware", nil)
	mustStatus(t, r, 200)
	out := map[string]map[string]any{}
	for _, x := range r.JSON(t)["firmware"].([]any) {
		m := x.(map[string]any)
		out[m["component"].(string)] = m
	}
	return out
}

// TestFirmwareComponents fills the firmware listing by inspection over
// Redfish, then flashes BIOS and BMC through firmware.update and checks
// the listing keeps the initial versions and shows the flashed ones, as
// the simulator reports them.
func TestFirmwareComponents(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		sim := bmctest.StartRedfish(t, "SIM_UPDATE_DELAY=1")
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerFirmwareIface)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "fwc-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		if got := firmwareBy(t, admin, id); len(got) != 0 {
			t.Errorf("firmware before inspection: %v", got)
		}
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		simBIOS := sim.Resource(t, sim.SystemPath("1"))["BiosVersion"]
		// manage (Ironic's verify) fills the caches before any
		// inspection or step, as Ironic's node_update_cache.
		if b := firmwareBy(t, admin, id)["bios"]; b == nil || b["current_version"] != simBIOS {
			t.Errorf("bios firmware after manage: %v (simulator %v)", b, simBIOS)
		}
		if list := admin.Do(t, "GET", "/v1/nodes/"+id+"/bios", nil).JSON(t)["bios"].([]any); len(list) == 0 {
			t.Error("no BIOS settings cached at manage")
		}
		provision(t, admin, id, map[string]any{"target": "inspect"}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("inspection: %v", n["last_error"])
		}
		fw := firmwareBy(t, admin, id)
		simBMC := sim.Resource(t, "/redfish/v1/Managers/1")["FirmwareVersion"]
		if b := fw["bios"]; b == nil || b["initial_version"] != simBIOS || b["current_version"] != simBIOS || b["last_version_flashed"] != nil || b["created_at"] == nil {
			t.Errorf("bios after inspection: %v (simulator %v)", b, simBIOS)
		}
		if b := fw["bmc"]; b == nil || b["current_version"] != simBMC {
			t.Errorf("bmc after inspection: %v (simulator %v)", b, simBMC)
		}
		// The identity columns hold what the BMC says, as Ironic's redfish
		// driver reads it: the BMC's model only.
		bmcRow, err := db.FirmwareComponent.Query().Where(firmwarecomponent.Component("bmc")).Only(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		simModel, _ := sim.Resource(t, "/redfish/v1/Managers/1")["Model"].(string)
		if got := deref(bmcRow.Model); got != simModel || bmcRow.Vendor != nil || bmcRow.SerialNumber != nil {
			t.Errorf("bmc identity model %q vendor %v serial %v, simulator model %q", got, bmcRow.Vendor, bmcRow.SerialNumber, simModel)
		}
		// The identity fields are 1.114's: absent before, shown from then on
		// (checked once the ladder reaches it).
		if _, shown := fw["bios"]["vendor"]; shown {
			t.Errorf("vendor shown at %s: %v", admin.Version, fw["bios"])
		}
		if api.VerMax >= api.VerFirmwareIdentity {
			var model any
			if bmcRow.Model != nil {
				model = *bmcRow.Model
			}
			if b := firmwareBy(t, atVer(admin, api.VerFirmwareIdentity), id)["bmc"]; b["model"] != model || b["vendor"] != nil {
				t.Errorf("bmc at 1.114: %v", b)
			}
		}

		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("firmware", "update", map[string]any{"settings": []any{
			map[string]any{"component": "bios", "url": "http://127.0.0.1:9/bios.bin", "wait": 1},
			map[string]any{"component": "bmc", "url": "http://127.0.0.1:9/bmc.bin"},
		}}))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("firmware update: %v", n["last_error"])
		}
		fw = firmwareBy(t, admin, id)
		newBIOS := sim.Resource(t, sim.SystemPath("1"))["BiosVersion"]
		newBMC := sim.Resource(t, "/redfish/v1/Managers/1")["FirmwareVersion"]
		if newBIOS == simBIOS || newBMC == simBMC {
			t.Fatalf("simulator versions unchanged: %v %v", newBIOS, newBMC)
		}
		for comp, v := range map[string][2]any{"bios": {simBIOS, newBIOS}, "bmc": {simBMC, newBMC}} {
			c := fw[comp]
			if c["initial_version"] != v[0] || c["current_version"] != v[1] || c["last_version_flashed"] != v[1] || c["updated_at"] == nil {
				t.Errorf("%s after update: %v, want initial %v and current and flashed %v", comp, c, v[0], v[1])
			}
		}

		// Readers of the owner may list; another project does not see the node.
		if got := firmwareBy(t, atVer(clients["owner-reader"], api.VerFirmwareIface), id); len(got) != 2 {
			t.Errorf("owner reader sees %v", got)
		}
		mustStatus(t, atVer(clients["other-admin"], api.VerFirmwareIface).Do(t, "GET", "/v1/nodes/"+id+"/firmware", nil), 404)

		// fields picks columns; created_at and updated_at always come, as in
		// Ironic. The identity fields are 400 before 1.114.
		r = admin.Do(t, "GET", "/v1/nodes/"+id+"/firmware?fields=component,current_version", nil)
		mustStatus(t, r, 200)
		if one := r.JSON(t)["firmware"].([]any)[0].(map[string]any); len(one) != 4 || one["component"] == nil || one["current_version"] == nil {
			t.Errorf("fields=component,current_version: %v", one)
		}
		if f := admin.Do(t, "GET", "/v1/nodes/"+id+"/firmware?fields=vendor", nil).Fault(t); !strings.Contains(f, "1.114") {
			t.Errorf("fields=vendor before 1.114: %q", f)
		}
		mustStatus(t, admin.Do(t, "GET", "/v1/nodes/"+id+"/firmware?fields=nope", nil), 400)
		mustStatus(t, admin.Do(t, "GET", "/v1/nodes/"+id+"/firmware?detail=maybe", nil), 400)
		mustStatus(t, admin.Do(t, "GET", "/v1/nodes/"+id+"/firmware?limit=1", nil), 400)
		// Older requests do not know the resource: Ironic's 404.
		mustStatus(t, atVer(admin, api.VerFirmwareIface-1).Do(t, "GET", "/v1/nodes/"+id+"/firmware", nil), 404)
	})
}

// TestFirmwareOnFakeHardware: the fake driver's synthetic components
// appear on the first firmware.update and show the bumped versions.
func TestFirmwareOnFakeHardware(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := atVer(clients["system-admin"], api.VerFirmwareIface)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "fwf-1", "driver": "fake"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		provision(t, admin, id, map[string]any{"target": "manage"}, 202)
		waitState(t, admin, id, "manageable")
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("firmware", "update", map[string]any{"settings": []any{
			map[string]any{"component": "bios", "url": "http://images.example/bios.bin"}}}))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("firmware update: %v", n["last_error"])
		}
		fw := firmwareBy(t, admin, id)
		if b := fw["bios"]; b["initial_version"] != "1.0.0" || b["current_version"] != "1.0.1" || b["last_version_flashed"] != "1.0.1" {
			t.Errorf("bios: %v", b)
		}
		if b := fw["bmc"]; b["initial_version"] != "1.00" || b["current_version"] != "1.00" || b["last_version_flashed"] != nil {
			t.Errorf("bmc: %v", b)
		}
	})
}

// TestVMediaOverRedfish attaches and detaches an ISO through
// /v1/nodes/{node}/vmedia and asks the simulator whether it is inserted.
func TestVMediaOverRedfish(t *testing.T) {
	iso := servertest.ServeISO(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		_, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerVMedia)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "vmd-1", "driver": "redfish", "driver_info": sim.DriverInfo("1"), "owner": "own", "lessee": "les"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		path := "/v1/nodes/" + id + "/vmedia"
		cd := func() map[string]any { return sim.Resource(t, sim.SystemPath("1")+"/VirtualMedia/Cd") }

		// Bad requests name the field and leave the BMC alone.
		for body, field := range map[string]string{
			`{"device_type":"tape","image_url":"` + iso + `"}`:                                    "device_type",
			`{"device_type":"cdrom"}`:                                                             "image_url",
			`{"device_type":"cdrom","image_url":"ftp://x/y.iso"}`:                                 "scheme",
			`{"device_type":"cdrom","image_url":"` + iso + `","image_download_source":"carrier"}`: "image_download_source",
			`{"device_type":"cdrom","image_url":"` + iso + `","nope":1}`:                          "nope",
		} {
			r := admin.Do(t, "POST", path, body)
			if r.Status != 400 || !strings.Contains(r.Fault(t), field) {
				t.Errorf("POST %s: %d %s, want 400 naming %s", body, r.Status, r.Body, field)
			}
		}
		mustStatus(t, admin.Do(t, "POST", path+"?x=1", map[string]any{"device_type": "cdrom", "image_url": iso}), 400)
		mustStatus(t, admin.Do(t, "DELETE", path+"?device_types=disk", nil), 400)
		mustStatus(t, admin.Do(t, "DELETE", path+"?x=1", nil), 400)
		if cd()["Inserted"] == true {
			t.Fatalf("Cd inserted by a refused request")
		}

		// A lessee member attaches (SYSTEM_OR_PROJECT_MEMBER); the BMC has it.
		member := atVer(clients["lessee-member"], api.VerVMedia)
		mustStatus(t, member.Do(t, "POST", path, map[string]any{"device_type": "cdrom", "image_url": iso, "image_download_source": "http"}), 204)
		vmediaSettled(t, admin, id)
		if m := cd(); m["Inserted"] != true || m["Image"] != iso {
			t.Errorf("simulator Cd after attach: inserted %v image %v", m["Inserted"], m["Image"])
		}
		get := atVer(clients["owner-reader"], api.VerVMediaGet)
		r = get.Do(t, "GET", path, nil)
		mustStatus(t, r, 200)
		var list []any
		if err := json.Unmarshal(r.Body, &list); err != nil {
			t.Fatalf("GET vmedia is not a JSON list: %v: %s", err, r.Body)
		}
		var found bool
		for _, x := range list {
			m := x.(map[string]any)
			if m["inserted"] == true && m["image"] == iso && strings.Contains(strings.Join(anyStrings(m["media_types"]), ","), "CD") {
				found = true
			}
		}
		if !found {
			t.Errorf("GET vmedia after attach: %s", r.Body)
		}
		mustStatus(t, get.Do(t, "DELETE", path, nil), 403)
		mustStatus(t, member.Do(t, "DELETE", path+"?device_types=cdrom", nil), 204)
		vmediaSettled(t, admin, id)
		if m := cd(); m["Inserted"] != false {
			t.Errorf("simulator Cd after detach: inserted %v image %v", m["Inserted"], m["Image"])
		}

		// Detaching everything works when nothing is inserted.
		mustStatus(t, admin.Do(t, "DELETE", path, nil), 204)
		if n := vmediaSettled(t, admin, id); n["last_error"] != nil {
			t.Errorf("detaching nothing: last_error %v", n["last_error"])
		}
		// Older requests do not know the resource: Ironic's 404.
		old := atVer(admin, api.VerVMedia-1)
		mustStatus(t, old.Do(t, "POST", path, map[string]any{"device_type": "cdrom", "image_url": iso}), 404)
		mustStatus(t, old.Do(t, "DELETE", path, nil), 404)
		mustStatus(t, atVer(admin, api.VerVMediaGet-1).Do(t, "GET", path, nil), 404)
	})
}

func anyStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
