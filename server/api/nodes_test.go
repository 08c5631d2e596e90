package api_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/internal/version"
	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

func start(t *testing.T, setting string) (*servertest.Server, *servertest.Client) {
	s := servertest.Start(t, server.Options{Database: setting, AuthNone: true})
	return s, s.Client()
}

func ipmiNode(name string) map[string]any {
	return map[string]any{
		"name": name, "driver": "ipmi",
		"driver_info": map[string]any{"ipmi_address": "192.0.2.10", "ipmi_username": "admin", "ipmi_password": "s3cret"},
		"properties":  map[string]any{"cpus": 8},
	}
}

func mustStatus(t *testing.T, r *servertest.Response, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status %d, want %d: %s", r.Status, want, r.Body)
	}
}

func TestVersionDiscovery(t *testing.T) {
	_, c := start(t, storetest.Setting(t, "sqlite"))
	r := c.Do(t, "GET", "/", nil)
	mustStatus(t, r, 200)
	dv := r.JSON(t)["default_version"].(map[string]any)
	if dv["version"] != api.VerMax.String() || dv["min_version"] != "1.1" {
		t.Fatalf("default_version = %v", dv)
	}
	if r.Header.Get("X-OpenStack-Ironic-API-Maximum-Version") != api.VerMax.String() {
		t.Fatalf("max header = %q", r.Header.Get("X-OpenStack-Ironic-API-Maximum-Version"))
	}
	// Both documents name the release answering, as internal/version
	// knows it (the binary's -X value, else the VCS stamp's "dev").
	if got := r.JSON(t)["anvil_version"]; got != version.Get().Version {
		t.Errorf("/ anvil_version = %v, want %q", got, version.Get().Version)
	}
	v1 := c.Do(t, "GET", "/v1", nil)
	mustStatus(t, v1, 200)
	if got := v1.JSON(t)["anvil_version"]; got != version.Get().Version {
		t.Errorf("/v1 anvil_version = %v, want %q", got, version.Get().Version)
	}

	cases := []struct {
		version string
		status  int
		used    string
	}{
		{"", 200, "1.1"},
		{"latest", 200, api.VerMax.String()},
		{"1.50", 200, "1.50"},
		{(api.VerMax + 1).String(), 406, ""},
		{"2.1", 406, ""},
		{"one", 400, ""},
		{"1.x", 400, ""},
	}
	for _, tc := range cases {
		c.Version = tc.version
		r := c.Do(t, "GET", "/v1/nodes", nil)
		if r.Status != tc.status {
			t.Errorf("version %q: status %d, want %d (%s)", tc.version, r.Status, tc.status, r.Body)
		}
		if got := r.Header.Get("X-OpenStack-Ironic-API-Version"); tc.used != "" && got != tc.used {
			t.Errorf("version %q: served %q, want %q", tc.version, got, tc.used)
		}
		if r.Header.Get("X-OpenStack-Ironic-API-Minimum-Version") != "1.1" {
			t.Errorf("version %q: no minimum-version header", tc.version)
		}
		if tc.status >= 400 && r.Fault(t) == "" {
			t.Errorf("version %q: no faultstring", tc.version)
		}
	}
}

func TestNodeLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, c := start(t, setting)
		r := c.Do(t, "POST", "/v1/nodes", ipmiNode("rack1-node1"))
		mustStatus(t, r, 201)
		n := r.JSON(t)
		id := n["uuid"].(string)
		if n["provision_state"] != "enroll" {
			t.Errorf("new node in %v, want enroll", n["provision_state"])
		}
		if di := n["driver_info"].(map[string]any); di["ipmi_password"] != "******" || di["ipmi_address"] != "192.0.2.10" {
			t.Errorf("driver_info not masked as expected: %v", di)
		}
		if !strings.HasSuffix(r.Header.Get("Location"), "/v1/nodes/"+id) {
			t.Errorf("Location = %q", r.Header.Get("Location"))
		}

		// Older clients do not see newer fields; before 1.11 new nodes
		// start available.
		old := *c
		old.Version = "1.10"
		r = old.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake"})
		mustStatus(t, r, 201)
		if m := r.JSON(t); m["provision_state"] != "available" || m["owner"] != nil {
			t.Errorf("1.10 create: %v", m)
		}
		if _, has := r.JSON(t)["owner"]; has {
			t.Error("owner shown at 1.10")
		}

		// Show by name and UUID, password never returned.
		for _, ident := range []string{id, "rack1-node1"} {
			r = c.Do(t, "GET", "/v1/nodes/"+ident, nil)
			mustStatus(t, r, 200)
			if strings.Contains(string(r.Body), "s3cret") {
				t.Fatal("password returned")
			}
		}

		patch := []map[string]any{
			{"op": "replace", "path": "/owner", "value": "proj-a"},
			{"op": "add", "path": "/lessee", "value": "proj-b"},
			{"op": "add", "path": "/extra/rack", "value": "r1"},
			{"op": "add", "path": "/driver_info/ipmi_priv_level", "value": "OPERATOR"},
		}
		r = c.Do(t, "PATCH", "/v1/nodes/"+id, patch)
		mustStatus(t, r, 200)
		n = r.JSON(t)
		if n["owner"] != "proj-a" || n["lessee"] != "proj-b" || n["extra"].(map[string]any)["rack"] != "r1" {
			t.Fatalf("patch not applied: %v", n)
		}
		// The untouched password survives a patch of its neighbour.
		row, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if row.DriverInfo["ipmi_password"] != "s3cret" || row.DriverInfo["ipmi_priv_level"] != "OPERATOR" {
			t.Fatalf("driver_info after patch: %v", row.DriverInfo)
		}

		// Filters.
		r = c.Do(t, "GET", "/v1/nodes?owner=proj-a", nil)
		mustStatus(t, r, 200)
		if got := len(r.JSON(t)["nodes"].([]any)); got != 1 {
			t.Fatalf("owner filter: %d nodes", got)
		}
		r = c.Do(t, "GET", "/v1/nodes?lessee=proj-b&detail=true", nil)
		if ns := r.JSON(t)["nodes"].([]any); len(ns) != 1 || ns[0].(map[string]any)["traits"] == nil {
			t.Fatalf("lessee filter detail: %s", r.Body)
		}

		// Traits.
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/"+id+"/traits", map[string]any{"traits": []string{"CUSTOM_GPU", "HW_CPU_X86_AVX2"}}), 204)
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/"+id+"/traits/CUSTOM_FW", nil), 204)
		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/"+id+"/traits/CUSTOM_GPU", nil), 204)
		r = c.Do(t, "GET", "/v1/nodes/"+id+"/traits", nil)
		if got := fmt.Sprint(r.JSON(t)["traits"]); got != "[CUSTOM_FW HW_CPU_X86_AVX2]" {
			t.Fatalf("traits = %s", got)
		}
		r = c.Do(t, "PUT", "/v1/nodes/"+id+"/traits/lowercase", nil)
		mustStatus(t, r, 400)
		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/"+id+"/traits/CUSTOM_NOPE", nil), 404)

		// Maintenance and history.
		mustStatus(t, c.Do(t, "PUT", "/v1/nodes/"+id+"/maintenance", map[string]any{"reason": "disk swap"}), 202)
		n = c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["maintenance"] != true || n["maintenance_reason"] != "disk swap" {
			t.Fatalf("maintenance not set: %v", n)
		}
		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/"+id+"/maintenance", nil), 202)
		n = c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if n["maintenance"] != false || n["maintenance_reason"] != nil {
			t.Fatalf("maintenance not cleared: %v", n)
		}
		r = c.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
		mustStatus(t, r, 200)
		// The owner and lessee set by the PATCH above, then maintenance.
		var events []string
		for _, e := range r.JSON(t)["history"].([]any) {
			events = append(events, e.(map[string]any)["event"].(string))
		}
		if want := []string{"Owner changed: (none) → proj-a", "Lessee changed: (none) → proj-b", "Maintenance set: disk swap", "Maintenance cleared"}; !slices.Equal(events, want) {
			t.Fatalf("history = %q, want %q", events, want)
		}

		mustStatus(t, c.Do(t, "DELETE", "/v1/nodes/"+id, nil), 204)
		mustStatus(t, c.Do(t, "GET", "/v1/nodes/"+id, nil), 404)
	})
}

func TestNodePagination(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		for i := 0; i < 7; i++ {
			body := map[string]any{"driver": "fake", "name": fmt.Sprintf("n%d", 6-i)}
			if i == 3 {
				delete(body, "name") // an unnamed node sorts first by name
			}
			mustStatus(t, c.Do(t, "POST", "/v1/nodes", body), 201)
		}
		for _, sort := range []string{"", "&sort_key=name", "&sort_key=name&sort_dir=desc", "&sort_key=created_at&sort_dir=desc"} {
			seen := map[string]bool{}
			var order []string
			path := "/v1/nodes?limit=3" + sort
			for pages := 0; path != ""; pages++ {
				if pages > 5 {
					t.Fatal("pagination does not end")
				}
				r := c.Do(t, "GET", strings.TrimPrefix(path, c.Base), nil)
				mustStatus(t, r, 200)
				m := r.JSON(t)
				for _, n := range m["nodes"].([]any) {
					u := n.(map[string]any)["uuid"].(string)
					if seen[u] {
						t.Fatalf("%s: node %s twice", sort, u)
					}
					seen[u] = true
					name, _ := n.(map[string]any)["name"].(string)
					order = append(order, name)
				}
				path, _ = m["next"].(string)
				if path != "" && !strings.Contains(path, "marker=") {
					t.Fatalf("next link without marker: %s", path)
				}
			}
			if len(seen) != 7 {
				t.Fatalf("%s: saw %d nodes, want 7", sort, len(seen))
			}
			if sort == "&sort_key=name" && strings.Join(order, ",") != ",n0,n1,n2,n4,n5,n6" {
				t.Fatalf("name order = %v", order)
			}
			if sort == "&sort_key=name&sort_dir=desc" && strings.Join(order, ",") != "n6,n5,n4,n2,n1,n0," {
				t.Fatalf("name desc order = %v", order)
			}
		}
		r := c.Do(t, "GET", "/v1/nodes?fields=uuid,owner", nil)
		mustStatus(t, r, 200)
		n := r.JSON(t)["nodes"].([]any)[0].(map[string]any)
		if _, has := n["provision_state"]; has || n["uuid"] == nil {
			t.Fatalf("fields not honoured: %v", n)
		}
		for _, bad := range []string{"?fields=uuid,bogus", "?sort_key=driver_info", "?sort_dir=up", "?limit=-1", "?limit=x", "?marker=nope", "?maintenance=maybe", "?fields=uuid&detail=true"} {
			r := c.Do(t, "GET", "/v1/nodes"+bad, nil)
			if r.Status != 400 || r.Fault(t) == "" {
				t.Errorf("%s: status %d %s", bad, r.Status, r.Body)
			}
		}
	})
}

// A detailed page larger than one chunk goes out streamed (no
// Content-Length) and whole: every node once, in the order the short list
// gives, the JSON intact across chunk boundaries, and the next link after
// the last node. An error before the first byte is still a status.
func TestNodeListStreamed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		for i := 0; i < 40; i++ {
			n := ipmiNode(fmt.Sprintf("stream-%02d", i))
			n["extra"] = map[string]any{"note": strings.Repeat("x", 1000)}
			mustStatus(t, c.Do(t, "POST", "/v1/nodes", n), 201)
		}
		short := c.Do(t, "GET", "/v1/nodes?limit=30&sort_key=name", nil)
		mustStatus(t, short, 200)
		r := c.Do(t, "GET", "/v1/nodes?detail=true&limit=30&sort_key=name", nil)
		mustStatus(t, r, 200)
		if len(r.Body) <= 64<<10 {
			t.Fatalf("a page of %d bytes does not cross a chunk boundary", len(r.Body))
		}
		if cl := r.Header.Get("Content-Length"); cl != "" {
			t.Errorf("Content-Length %s: the page was built whole, not streamed", cl)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		uuids := func(m map[string]any) []string {
			var out []string
			for _, n := range m["nodes"].([]any) {
				out = append(out, n.(map[string]any)["uuid"].(string))
			}
			return out
		}
		m := r.JSON(t)
		got, want := uuids(m), uuids(short.JSON(t))
		if !slices.Equal(got, want) || len(got) != 30 {
			t.Fatalf("detailed page %v, want %v", got, want)
		}
		for _, n := range m["nodes"].([]any) {
			if n.(map[string]any)["extra"].(map[string]any)["note"] != strings.Repeat("x", 1000) {
				t.Fatalf("node %v: extra damaged", n.(map[string]any)["name"])
			}
		}
		if next, _ := m["next"].(string); !strings.Contains(next, "marker="+got[29]) {
			t.Errorf("next %q does not start after %s", next, got[29])
		}
		mustStatus(t, c.Do(t, "GET", "/v1/nodes?detail=true&marker=nope", nil), 400)
	})
}
