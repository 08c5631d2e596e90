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

// notYet lists the keys of Ironic's node that Anvil does not show yet, each
// with the branch expected to add it. Delete an entry when its field lands:
// the shape test fails while a listed field is shown, and for any field of
// Ironic's table that is neither shown nor listed here.
var notYet = map[string]string{}

// ironicNodeFields reads testdata/ironic_node_fields.txt: each key of
// Ironic's node and the microversion it appeared in.
func ironicNodeFields(t *testing.T) map[string]api.Version {
	t.Helper()
	f, err := os.Open("testdata/ironic_node_fields.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]api.Version{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, ver, ok := strings.Cut(line, " ")
		minor, err := strconv.Atoi(strings.TrimPrefix(ver, "1."))
		if !ok || err != nil || !strings.HasPrefix(ver, "1.") {
			t.Fatalf("testdata line %q: want \"field 1.N\"", line)
		}
		out[name] = api.Version(minor)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// versionedEndpoints are resources that appeared after 1.1, with the
// version Ironic added them at and its answer to an older request (from
// Ironic's own tests: test_allocation, test_runbook, test_node, ...).
var versionedEndpoints = []struct {
	method, path string
	body         string
	since        api.Version
	below        int
}{
	{"GET", "/v1/nodes/{n}/states", "", api.VerMin, 0},
	{"GET", "/v1/drivers", "", api.VerMin, 0},
	{"GET", "/v1/nodes/{n}/traits", "", api.VerTraits, 406},
	{"GET", "/v1/conductors", "", api.VerConductor, 404},
	{"GET", "/v1/allocations", "", api.VerAllocations, 404},
	{"POST", "/v1/allocations", `{"resource_class":"shape-none","name":"shape-{v}"}`, api.VerAllocations, 405},
	{"GET", "/v1/nodes/{n}/history", "", api.VerHistory, 404},
	{"GET", "/v1/runbooks", "", api.VerRunbooks, 404},
	{"GET", "/v1/runbooks/{rb}", "", api.VerRunbooks, 404},
	{"POST", "/v1/runbooks", `{"name":"CUSTOM_SHAPE_{v}","steps":[{"interface":"power","step":"reboot","order":1}]}`, api.VerRunbooks, 405},
	{"GET", "/v1/runbooks/{rb}/traits", "", api.VerRunbookTraits, 404},
	{"GET", "/v1/nodes/{n}/firmware", "", api.VerFirmwareIface, 404},
	{"DELETE", "/v1/nodes/{n}/vmedia", "", api.VerVMedia, 404},
	{"GET", "/v1/nodes/{n}/vmedia", "", api.VerVMediaGet, 404},
	{"PUT", "/v1/nodes/{n}/management/inject_nmi", "", api.VerInjectNMI, 404},
	{"GET", "/v1/nodes/{n}/management/indicators", "", api.VerIndicators, 404},
	{"GET", "/v1/nodes/{n}/management/indicators/led@system", "", api.VerIndicators, 404},
	{"PUT", "/v1/nodes/{n}/management/indicators/led@system", `{"state":"on"}`, api.VerIndicators, 404},
}

// TestNodeShapePerVersion walks the ladder 1.1..VerMax: at each version a
// node shows exactly the keys Ironic's node shows at that version (less
// notYet), and each resource answers from its version on and is refused
// as Ironic refuses it below.
func TestNodeShapePerVersion(t *testing.T) {
	want := ironicNodeFields(t)
	for f := range notYet {
		if _, ok := want[f]; !ok {
			t.Errorf("notYet lists %q, which Ironic's node does not have", f)
		}
	}
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "shape", "driver": "fake"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		r = c.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_SHAPE_RB", "steps": rbSteps})
		mustStatus(t, r, 201)
		rb := r.JSON(t)["uuid"].(string)
		for v := api.VerMin; v <= api.VerMax; v++ {
			c.Version = v.String()
			r := c.Do(t, "GET", "/v1/nodes/"+id, nil)
			mustStatus(t, r, 200)
			var got, exp []string
			for k := range r.JSON(t) {
				got = append(got, k)
				if _, known := want[k]; !known {
					t.Errorf("%s: Anvil shows %q, which Ironic's node does not have", v, k)
				}
				if b, listed := notYet[k]; listed {
					t.Errorf("%s: %q is shown now (branch %s): delete it from notYet", v, k, b)
				}
			}
			for k, since := range want {
				if _, listed := notYet[k]; since <= v && !listed {
					exp = append(exp, k)
				}
			}
			slices.Sort(got)
			slices.Sort(exp)
			if !slices.Equal(got, exp) {
				t.Errorf("%s: node keys\n got %v\nwant %v", v, got, exp)
			}

			for _, e := range versionedEndpoints {
				path := strings.NewReplacer("{n}", id, "{rb}", rb).Replace(e.path)
				var body any
				if e.body != "" {
					body = strings.ReplaceAll(e.body, "{v}", strconv.Itoa(int(v)))
				}
				r := c.Do(t, e.method, path, body)
				switch {
				case v < e.since && r.Status != e.below:
					t.Errorf("%s %s %s (from %s): status %d, want %d: %s", v, e.method, e.path, e.since, r.Status, e.below, r.Body)
				case v >= e.since && r.Status >= 400:
					t.Errorf("%s %s %s (from %s): status %d: %s", v, e.method, e.path, e.since, r.Status, r.Body)
				}
			}
		}
	})
}
