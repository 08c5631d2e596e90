package api_test

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// resourceNotYet lists "resource field" keys of Ironic's that Anvil does
// not show yet, with why; the test fails for a listed key that is shown,
// so delete the entry when the field lands. Every field is built.
var resourceNotYet = map[string]string{}

// ironicResourceFields reads testdata/ironic_resource_fields.txt: for each
// resource, each key of Ironic's object and the version it appeared in.
func ironicResourceFields(t *testing.T) map[string]map[string]api.Version {
	t.Helper()
	f, err := os.Open("testdata/ironic_resource_fields.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]api.Version{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 3 || !strings.HasPrefix(fs[2], "1.") {
			t.Fatalf("testdata line %q: want \"resource field 1.N\"", line)
		}
		minor, err := strconv.Atoi(strings.TrimPrefix(fs[2], "1."))
		if err != nil {
			t.Fatalf("testdata line %q: %v", line, err)
		}
		if out[fs[0]] == nil {
			out[fs[0]] = map[string]api.Version{}
		}
		out[fs[0]][fs[1]] = api.Version(minor)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// listDefaults are the keys of an item in each resource's list without
// ?detail= or ?fields=, besides links: Ironic's DEFAULT_RETURN_FIELDS of
// each controller (same commit as the testdata). Allocations have none
// and list whole objects; drivers list name, hosts and, from their
// versions, properties and type (driver.py convert_with_links without
// detail).
var listDefaults = map[string][]string{
	"port":             {"uuid", "address"},
	"portgroup":        {"uuid", "address", "name"},
	"chassis":          {"uuid", "description"},
	"deploy_template":  {"uuid", "name"},
	"runbook":          {"uuid", "name"},
	"conductor":        {"hostname", "conductor_group", "alive"},
	"driver":           {"name", "hosts", "properties", "type"},
	"volume_connector": {"uuid", "node_uuid", "type", "connector_id"},
	"volume_target":    {"uuid", "node_uuid", "volume_type", "boot_index", "volume_id"},
	"inspection_rule":  {"uuid", "priority", "phase", "description"},
}

// collections are where each resource is listed, and its list's key.
var collections = map[string][2]string{
	"port": {"/v1/ports", "ports"}, "portgroup": {"/v1/portgroups", "portgroups"}, "chassis": {"/v1/chassis", "chassis"},
	"allocation": {"/v1/allocations", "allocations"}, "deploy_template": {"/v1/deploy_templates", "deploy_templates"},
	"runbook": {"/v1/runbooks", "runbooks"}, "conductor": {"/v1/conductors", "conductors"}, "driver": {"/v1/drivers", "drivers"},
	"volume_connector": {"/v1/volume/connectors", "connectors"}, "volume_target": {"/v1/volume/targets", "targets"},
	"inspection_rule": {"/v1/inspection_rules", "inspection_rules"},
}

// TestResourceShapePerVersion walks 1.1..VerMax, whatever VerMax is: at
// each version one object of every resource besides the node shows
// exactly the keys Ironic's shows at that version (less resourceNotYet),
// from the version Anvil offers the resource at.
func TestResourceShapePerVersion(t *testing.T) {
	want := ironicResourceFields(t)
	for k := range resourceNotYet {
		res, field, _ := strings.Cut(k, " ")
		if _, ok := want[res][field]; !ok {
			t.Errorf("resourceNotYet lists %q, which Ironic does not have", k)
		}
	}
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		create := func(path string, body map[string]any) string {
			t.Helper()
			r := c.Do(t, "POST", path, body)
			mustStatus(t, r, 201)
			return r.JSON(t)["uuid"].(string)
		}
		node := create("/v1/nodes", map[string]any{"name": "resshape", "driver": "fake"})
		r := c.Do(t, "GET", "/v1/conductors", nil)
		mustStatus(t, r, 200)
		conductors := r.JSON(t)["conductors"].([]any)
		if len(conductors) == 0 {
			t.Fatalf("no conductors: %s", r.Body)
		}
		paths := map[string]string{
			"port":             "/v1/ports/" + create("/v1/ports", map[string]any{"node_uuid": node, "address": "52:54:00:5a:00:01"}),
			"portgroup":        "/v1/portgroups/" + create("/v1/portgroups", map[string]any{"node_uuid": node, "address": "52:54:00:5a:00:02", "name": "pg-shape"}),
			"chassis":          "/v1/chassis/" + create("/v1/chassis", map[string]any{"description": "shape"}),
			"allocation":       "/v1/allocations/" + create("/v1/allocations", map[string]any{"resource_class": "shape-none"}),
			"deploy_template":  "/v1/deploy_templates/" + create("/v1/deploy_templates", map[string]any{"name": "CUSTOM_SHAPE_DT", "steps": []any{map[string]any{"interface": "power", "step": "reboot", "args": map[string]any{}, "priority": 1}}}),
			"runbook":          "/v1/runbooks/" + create("/v1/runbooks", map[string]any{"name": "CUSTOM_SHAPE_RB", "steps": rbSteps}),
			"conductor":        "/v1/conductors/" + conductors[0].(map[string]any)["hostname"].(string),
			"driver":           "/v1/drivers/fake-hardware",
			"volume_connector": "/v1/volume/connectors/" + create("/v1/volume/connectors", map[string]any{"node_uuid": node, "type": "iqn", "connector_id": "iqn.2010-10.org.openstack:shape"}),
			"volume_target":    "/v1/volume/targets/" + create("/v1/volume/targets", map[string]any{"node_uuid": node, "volume_type": "iscsi", "volume_id": "vol-shape", "boot_index": 0}),
			"inspection_rule":  "/v1/inspection_rules/" + create("/v1/inspection_rules", map[string]any{"actions": []any{map[string]any{"op": "set-attribute", "args": map[string]any{"path": "/extra/a", "value": "b"}}}}),
		}
		for res := range want {
			if paths[res] == "" {
				t.Errorf("testdata has %q, which the test does not fetch", res)
			}
		}
		for v := api.VerMin; v <= api.VerMax; v++ {
			c.Version = v.String()
			for res, fields := range want {
				since := slices.Min(slices.Collect(func(yield func(api.Version) bool) {
					for _, s := range fields {
						if !yield(s) {
							return
						}
					}
				}))
				if v < since {
					continue
				}
				r := c.Do(t, "GET", paths[res], nil)
				if r.Status != 200 {
					t.Errorf("%s %s: status %d: %s", v, res, r.Status, r.Body)
					continue
				}
				got := keysOf(r.JSON(t))
				var exp []string
				for f, s := range fields {
					if _, listed := resourceNotYet[res+" "+f]; s <= v && !listed {
						exp = append(exp, f)
					}
				}
				slices.Sort(exp)
				for _, f := range got {
					if _, known := fields[f]; !known {
						t.Errorf("%s %s: Anvil shows %q, which Ironic's does not have", v, res, f)
					} else if why, listed := resourceNotYet[res+" "+f]; listed {
						t.Errorf("%s %s: %q is shown now (%s): delete it from resourceNotYet", v, res, f, why)
					}
				}
				if !slices.Equal(got, exp) {
					t.Errorf("%s %s: keys\n got %v\nwant %v", v, res, got, exp)
				}

				// The same object in its list, with the list's defaults.
				coll := collections[res]
				r = c.Do(t, "GET", coll[0], nil)
				if r.Status != 200 {
					t.Errorf("%s %s list: status %d: %s", v, res, r.Status, r.Body)
					continue
				}
				var item map[string]any
				for _, it := range r.JSON(t)[coll[1]].([]any) {
					if m := it.(map[string]any); item == nil || m["name"] == "fake-hardware" {
						item = m
					}
				}
				if item == nil {
					t.Errorf("%s %s list: empty: %s", v, res, r.Body)
					continue
				}
				if d, ok := listDefaults[res]; ok {
					exp = []string{"links"}
					for _, f := range d {
						if s, ok := fields[f]; ok && s <= v {
							exp = append(exp, f)
						}
					}
					slices.Sort(exp)
				}
				if got := keysOf(item); !slices.Equal(got, exp) {
					t.Errorf("%s %s list: keys\n got %v\nwant %v", v, res, got, exp)
				}
			}
		}
	})
}
