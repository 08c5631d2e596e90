package api_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// at returns a copy of c speaking microversion v.
func at(c *servertest.Client, v string) *servertest.Client {
	cp := *c
	cp.Version = v
	return &cp
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestDrivers checks /v1/drivers against what Ironic answers: the three
// hardware types with their live conductor, detail per microversion,
// the classic/dynamic filter, fields, properties and RAID metadata, and
// a 400 naming the parameter for every bad query.
func TestDrivers(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		reader := clients["system-reader"]

		r := reader.Do(t, "GET", "/v1/drivers", nil)
		mustStatus(t, r, 200)
		var got []string
		for _, d := range r.JSON(t)["drivers"].([]any) {
			d := d.(map[string]any)
			got = append(got, d["name"].(string))
			if hosts := d["hosts"].([]any); len(hosts) != 1 {
				t.Errorf("driver %v hosts %v, want the one conductor", d["name"], hosts)
			}
			if d["type"] != "dynamic" || len(d["properties"].([]any)) != 2 || len(d["links"].([]any)) != 2 {
				t.Errorf("driver %v: %v", d["name"], d)
			}
			if _, ok := d["default_power_interface"]; ok {
				t.Errorf("list without detail shows interfaces: %v", d)
			}
		}
		if strings.Join(got, ",") != "bmclib,fake-hardware,ipmi,redfish" {
			t.Errorf("drivers %v", got)
		}

		d := reader.Do(t, "GET", "/v1/drivers?detail=true", nil).JSON(t)["drivers"].([]any)[2].(map[string]any)
		if d["name"] != "ipmi" || d["default_power_interface"] != "ipmitool" || d["default_raid_interface"] != "no-raid" ||
			d["default_deploy_interface"] != "direct" || fmt.Sprint(d["enabled_management_interfaces"]) != "[ipmitool]" ||
			fmt.Sprint(d["enabled_boot_interfaces"]) != "[ipxe pxe]" || fmt.Sprint(d["enabled_raid_interfaces"]) != "[no-raid agent]" {
			t.Errorf("ipmi in detail: %v", d)
		}
		// The consoles offered are the ones Anvil runs (console.go).
		if fmt.Sprint(d["enabled_console_interfaces"]) != "[no-console ipmitool-socat]" || d["default_console_interface"] != "no-console" {
			t.Errorf("ipmi consoles: %v, default %v", d["enabled_console_interfaces"], d["default_console_interface"])
		}
		if rf := reader.Do(t, "GET", "/v1/drivers/redfish", nil).JSON(t); fmt.Sprint(rf["enabled_console_interfaces"]) != "[no-console]" {
			t.Errorf("redfish consoles: %v", rf["enabled_console_interfaces"])
		}
		if _, ok := d["default_firmware_interface"]; !ok {
			t.Errorf("firmware interface not shown at latest: %v", d)
		}
		if d85 := at(reader, "1.85").Do(t, "GET", "/v1/drivers?detail=true", nil).JSON(t)["drivers"].([]any)[2].(map[string]any); d85["default_firmware_interface"] != nil {
			t.Errorf("firmware interface shown before 1.86: %v", d85)
		}
		old := at(reader, "1.35").Do(t, "GET", "/v1/drivers?detail=true", nil).JSON(t)["drivers"].([]any)[0].(map[string]any)
		if _, ok := old["default_rescue_interface"]; ok || old["default_storage_interface"] != "noop" {
			t.Errorf("1.35 shows %v", keysOf(old))
		}
		if old := at(reader, "1.13").Do(t, "GET", "/v1/drivers", nil).JSON(t)["drivers"].([]any)[0].(map[string]any); old["properties"] != nil || old["type"] != nil {
			t.Errorf("1.13 shows %v", keysOf(old))
		}

		if n := len(reader.Do(t, "GET", "/v1/drivers?type=classic", nil).JSON(t)["drivers"].([]any)); n != 0 {
			t.Errorf("%d classic drivers, want none", n)
		}
		if n := len(reader.Do(t, "GET", "/v1/drivers?type=dynamic", nil).JSON(t)["drivers"].([]any)); n != 4 {
			t.Errorf("%d dynamic drivers, want 4", n)
		}
		f := reader.Do(t, "GET", "/v1/drivers?fields=name", nil).JSON(t)["drivers"].([]any)[0].(map[string]any)
		if strings.Join(keysOf(f), ",") != "links,name" {
			t.Errorf("fields=name gives %v", keysOf(f))
		}

		for _, tc := range []struct {
			path, version string
			want          int
			field         string
		}{
			{"/v1/drivers?type=modern", "", 400, "type"},
			{"/v1/drivers?detail=maybe", "", 400, "detail"},
			{"/v1/drivers?detail=true&fields=name", "", 400, "fields"},
			{"/v1/drivers?fields=name,hostz", "", 400, "hostz"},
			{"/v1/drivers?colour=red", "", 400, "colour"},
			{"/v1/drivers?detail=true", "1.29", 406, "1.30"},
			{"/v1/drivers?type=dynamic", "1.29", 406, "1.30"},
			{"/v1/drivers?fields=name", "1.76", 406, "1.77"},
			{"/v1/drivers/ipmi?fields=nope", "", 400, "nope"},
			{"/v1/drivers/ipmi?detail=true", "", 400, "detail"},
			{"/v1/drivers/nope", "", 404, "nope"},
			{"/v1/drivers/nope/properties", "", 404, "nope"},
			{"/v1/drivers/ipmi/properties?x=1", "", 400, "x"},
			{"/v1/drivers/nope/raid/logical_disk_properties", "", 404, "nope"},
			{"/v1/drivers/ipmi/raid/logical_disk_properties", "1.11", 406, "1.12"},
		} {
			c := reader
			if tc.version != "" {
				c = at(reader, tc.version)
			}
			r := c.Do(t, "GET", tc.path, nil)
			if r.Status != tc.want || !strings.Contains(r.Fault(t), tc.field) {
				t.Errorf("GET %s at %q: %d %q, want %d naming %s", tc.path, tc.version, r.Status, r.Fault(t), tc.want, tc.field)
			}
		}

		show := reader.Do(t, "GET", "/v1/drivers/redfish", nil)
		mustStatus(t, show, 200)
		if s := show.JSON(t); s["name"] != "redfish" || s["default_management_interface"] != "redfish" {
			t.Errorf("show redfish: %v", s)
		}
		if s := reader.Do(t, "GET", "/v1/drivers/fake", nil).JSON(t); s["name"] != "fake-hardware" {
			t.Errorf("the fake alias shows %v", s["name"])
		}
		props := reader.Do(t, "GET", "/v1/drivers/ipmi/properties", nil).JSON(t)
		if !strings.Contains(fmt.Sprint(props["ipmi_address"]), "Required") || props["ipmi_password"] == nil || props["redfish_address"] != nil {
			t.Errorf("ipmi properties %v", keysOf(props))
		}
		// Ironic's fake interfaces report their vendor interface's.
		want := map[string]any{"B1": "B1 description. Required.", "B2": "B2 description. Required."}
		for _, d := range []string{"fake-hardware", "fake"} {
			if props := reader.Do(t, "GET", "/v1/drivers/"+d+"/properties", nil).JSON(t); !reflect.DeepEqual(props, want) {
				t.Errorf("%s properties %v, want Ironic's %v", d, props, want)
			}
		}
		raid := reader.Do(t, "GET", "/v1/drivers/redfish/raid/logical_disk_properties", nil).JSON(t)
		if raid["raid_level"] == nil || raid["size_gb"] == nil || len(raid) != 10 {
			t.Errorf("raid properties %v", keysOf(raid))
		}
	})
}

// TestDriverNames: a new node keeps the name its client sent, fake and
// fake-hardware both drive the fake BMC, and an unknown driver is
// refused with Ironic's names.
func TestDriverNames(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, admin := start(t, setting)
		for _, name := range []string{"fake-hardware", "fake"} {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "n-" + name, "driver": name})
			mustStatus(t, r, 201)
			n := r.JSON(t)
			if n["driver"] != name {
				t.Errorf("node enrolled with %s reports driver %v", name, n["driver"])
			}
			id := n["uuid"].(string)
			mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
			sup := admin.Do(t, "GET", "/v1/nodes/"+id+"/management/boot_device/supported", nil)
			mustStatus(t, sup, 200)
			if got := fmt.Sprint(sup.JSON(t)["supported_boot_devices"]); got != "[pxe disk cdrom bios safe]" {
				t.Errorf("%s supports %s", name, got)
			}
		}
		// A filter by either name finds the nodes stored under both.
		for _, q := range []string{"fake", "fake-hardware"} {
			var got []string
			for _, n := range admin.Do(t, "GET", "/v1/nodes?sort_key=name&driver="+q, nil).JSON(t)["nodes"].([]any) {
				got = append(got, n.(map[string]any)["name"].(string))
			}
			if strings.Join(got, ",") != "n-fake,n-fake-hardware" {
				t.Errorf("?driver=%s lists %v", q, got)
			}
		}
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake_hw"})
		mustStatus(t, r, 400)
		if f := r.Fault(t); !strings.Contains(f, "fake-hardware, ipmi, redfish") {
			t.Errorf("unknown driver: %q", f)
		}
		rf := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "rf", "driver": "redfish", "driver_info": map[string]any{"redfish_address": "https://192.0.2.20"}})
		mustStatus(t, rf, 201)
		sup := admin.Do(t, "GET", "/v1/nodes/rf/management/boot_device/supported", nil)
		if got := fmt.Sprint(sup.JSON(t)["supported_boot_devices"]); got != "[pxe disk cdrom bios uefihttp]" {
			t.Errorf("redfish supports %s", got)
		}
		mustStatus(t, admin.Do(t, "GET", "/v1/nodes/rf/management/boot_device/supported?all=1", nil), 400)
		mustStatus(t, admin.Do(t, "GET", "/v1/nodes/nope/management/boot_device/supported", nil), 404)
	})
}

// TestConductorShow: one conductor by hostname with Ironic's fields,
// fields= narrowing, 404 for an unknown host, and system scope only.
func TestConductorShow(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		reader := clients["system-reader"]
		list := reader.Do(t, "GET", "/v1/conductors", nil).JSON(t)["conductors"].([]any)
		host := list[0].(map[string]any)["hostname"].(string)

		r := reader.Do(t, "GET", "/v1/conductors/"+host, nil)
		mustStatus(t, r, 200)
		c := r.JSON(t)
		if strings.Join(keysOf(c), ",") != "alive,conductor_group,created_at,drivers,hostname,links,updated_at" ||
			c["alive"] != true || fmt.Sprint(c["drivers"]) != "[bmclib fake-hardware ipmi redfish]" {
			t.Errorf("conductor %v", c)
		}
		if f := reader.Do(t, "GET", "/v1/conductors/"+host+"?fields=hostname,alive", nil).JSON(t); strings.Join(keysOf(f), ",") != "alive,hostname,links" {
			t.Errorf("fields gives %v", keysOf(f))
		}
		for path, want := range map[string]int{
			"/v1/conductors/no-such-host":               404,
			"/v1/conductors/" + host + "?fields=colour": 400,
			"/v1/conductors/" + host + "?detail=true":   400,
		} {
			if got := reader.Do(t, "GET", path, nil).Status; got != want {
				t.Errorf("GET %s: %d, want %d", path, got, want)
			}
		}
		for _, p := range personas {
			want := 403
			switch {
			case p.role == "":
				want = 401
			case p.scope.System, p.name == "service-project-service":
				// conductor:get is SYSTEM_READER, which rule:service_role joins.
				want = 200
			}
			if got := clients[p.name].Do(t, "GET", "/v1/conductors/"+host, nil).Status; got != want {
				t.Errorf("%s: %d, want %d", p.name, got, want)
			}
		}
	})
}
