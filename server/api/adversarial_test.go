package api_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/ent/auditevent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// The standing adversarial tests: what a hostile tenant tries, one table
// per class of attack. Each row is a request that must not leak, widen or
// lose anything, whatever status it gets.

const (
	bmcPassword = "s3cret-bmc-pw"
	cdSecret    = "configdrive-user-data-secret"
)

// secretNode enrols a fresh IPMI node owned by "own" and leased to "les"
// whose driver_info and instance_info hold secrets.
func secretNode(t *testing.T, admin *servertest.Client, name string) string {
	t.Helper()
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{
		"name": name, "driver": "ipmi", "owner": "own", "lessee": "les",
		"driver_info":   map[string]any{"ipmi_address": "192.0.2.9", "ipmi_username": "root", "ipmi_password": bmcPassword},
		"instance_info": map[string]any{"configdrive": cdSecret, "image_source": "http://img"},
	})
	mustStatus(t, r, 201)
	return r.JSON(t)["uuid"].(string)
}

// TestPatchNeverReadsSecrets: every JSON-patch operation that reads a path
// (copy, move, test) against every secret-bearing field, by every persona
// that may see the node. Whatever the status, no response and no field
// anyone can read afterwards holds a secret, and a secret nobody asked to
// change is still stored.
func TestPatchNeverReadsSecrets(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		patches := []string{
			`[{"op":"copy","from":"/driver_info","path":"/extra/all"}]`,
			`[{"op":"copy","from":"/driver_info/ipmi_password","path":"/extra/pw"}]`,
			`[{"op":"move","from":"/driver_info/ipmi_password","path":"/extra/pw"}]`,
			`[{"op":"copy","from":"/driver_info/ipmi_password","path":"/driver_info/ipmi_username"}]`,
			`[{"op":"move","from":"/driver_info/ipmi_password","path":"/driver_info/ipmi_address"}]`,
			`[{"op":"copy","from":"/driver_info/ipmi_password","path":"/description"}]`,
			`[{"op":"copy","from":"/driver_info/ipmi_password","path":"/name"}]`,
			`[{"op":"copy","from":"/instance_info","path":"/extra/ii"}]`,
			`[{"op":"copy","from":"/instance_info/configdrive","path":"/extra/cd"}]`,
			`[{"op":"move","from":"/instance_info/configdrive","path":"/instance_info/image_source"}]`,
			`[{"op":"copy","from":"/driver_info","path":"/properties/x"}]`,
			`[{"op":"copy","from":"/driver_info/ipmi_password","path":"/driver_info/redfish_password"}]`,
		}
		readers := []string{"system-admin", "system-member", "owner-admin", "owner-member", "lessee-admin", "lessee-member", "lessee-reader"}
		i := 0
		for _, patch := range patches {
			for _, persona := range readers {
				i++
				id := secretNode(t, admin, fmt.Sprintf("sec-%d", i))
				r := clients[persona].Do(t, "PATCH", "/v1/nodes/"+id, patch)
				if r.Status == 500 {
					t.Errorf("%s %s: 500: %s", persona, patch, r.Body)
				}
				for _, who := range []string{persona, "system-admin"} {
					got := clients[who].Do(t, "GET", "/v1/nodes/"+id, nil)
					for _, body := range [][]byte{r.Body, got.Body} {
						if s := string(body); strings.Contains(s, bmcPassword) || strings.Contains(s, cdSecret) {
							t.Errorf("%s %s (status %d): a secret is readable by %s: %s", persona, patch, r.Status, who, s)
						}
					}
				}
				n, err := db.Node.Get(context.Background(), nodeID(t, db, id))
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range n.DriverInfo {
					if v == "******" && r.Status == 200 {
						t.Errorf("%s %s: driver_info.%s stored as the mask", persona, patch, k)
					}
				}
				if !strings.Contains(patch, `"move","from":"/driver_info/ipmi_password"`) || r.Status != 200 {
					if n.DriverInfo["ipmi_password"] != bmcPassword {
						t.Errorf("%s %s (status %d): stored password became %v", persona, patch, r.Status, n.DriverInfo["ipmi_password"])
					}
				}
			}
		}

		// A test operation is no oracle: the right and a wrong guess answer
		// alike, for everyone.
		id := secretNode(t, admin, "oracle")
		for _, persona := range readers {
			var statuses []int
			for _, guess := range []string{bmcPassword, "wrong-guess", "******"} {
				r := clients[persona].Do(t, "PATCH", "/v1/nodes/"+id, fmt.Sprintf(`[{"op":"test","path":"/driver_info/ipmi_password","value":%q}]`, guess))
				statuses = append(statuses, r.Status)
			}
			if statuses[0] != statuses[1] {
				t.Errorf("%s: test with the right password answers %d, a wrong one %d", persona, statuses[0], statuses[1])
			}
		}
	})
}

func nodeID(t *testing.T, db *store.DB, id string) int {
	t.Helper()
	n, err := db.Node.Query().Where(node.UUID(id)).OnlyID(context.Background())
	if err != nil {
		t.Fatalf("node %s: %v", id, err)
	}
	return n
}

// TestConcurrentUpdatesAreNotLost: many clients changing one node or one
// runbook at once each see their change kept, on both databases.
func TestConcurrentUpdatesAreNotLost(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "busy", "driver": "fake", "owner": "own"})
		mustStatus(t, r, 201)
		const n = 120
		var wg sync.WaitGroup
		statuses := make([]int, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := clients[[]string{"system-admin", "owner-member", "owner-admin"}[i%3]]
				statuses[i] = c.Do(t, "PATCH", "/v1/nodes/busy", fmt.Sprintf(`[{"op":"add","path":"/extra/k%d","value":%d}]`, i, i)).Status
			}()
		}
		wg.Wait()
		for i, s := range statuses {
			if s != 200 {
				t.Errorf("patch %d: status %d", i, s)
			}
		}
		extra := admin.Do(t, "GET", "/v1/nodes/busy", nil).JSON(t)["extra"].(map[string]any)
		if len(extra) != n {
			t.Errorf("%d of %d concurrent extra keys stored", len(extra), n)
		}

		// The same for a runbook, patched by its project's managers.
		r = clients["owner-manager"].Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_BUSY", "steps": []any{map[string]any{"interface": "power", "step": "power_on", "args": map[string]any{}, "order": 1}}})
		mustStatus(t, r, 201)
		rb := r.JSON(t)["uuid"].(string)
		const m = 60
		statuses = make([]int, m)
		for i := range m {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := clients[[]string{"owner-manager", "owner-admin", "system-admin"}[i%3]]
				statuses[i] = c.Do(t, "PATCH", "/v1/runbooks/"+rb, fmt.Sprintf(`[{"op":"add","path":"/extra/k%d","value":%d}]`, i, i)).Status
			}()
		}
		wg.Wait()
		for i, s := range statuses {
			if s != 200 {
				t.Errorf("runbook patch %d: status %d", i, s)
			}
		}
		rbExtra := admin.Do(t, "GET", "/v1/runbooks/"+rb, nil).JSON(t)["extra"].(map[string]any)
		if len(rbExtra) != m {
			t.Errorf("%d of %d concurrent runbook extra keys stored", len(rbExtra), m)
		}
	})
}

// TestAuthorizeBeforeValidate: a caller who may not see a node learns
// nothing from its request's validation, and one who may not act gets 403
// whatever its body holds.
func TestAuthorizeBeforeValidate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "target", "driver": "fake", "owner": "own", "lessee": "les"}), 201)
		rows := []struct {
			persona, method, path, body string
			want                        int
		}{
			{"other-admin", "PUT", "/states/provision", `{"target":"deploy-nonsense"}`, 404},
			{"other-admin", "PUT", "/states/provision", `{"target":"clean","clean_steps":"x"}`, 404},
			{"other-admin", "PUT", "/states/power", `{"target":"sideways"}`, 404},
			{"other-admin", "PUT", "/management/boot_device", `{"boot_device":"floppy-disk"}`, 404},
			{"other-admin", "PATCH", "", `[{"op":"replace","path":"/uuid","value":"x"}]`, 404},
			{"other-admin", "PUT", "/traits", `{"traits":"not-a-list"}`, 404},
			{"other-admin", "PUT", "/maintenance", `{"reason":5}`, 404},
			{"lessee-member", "PUT", "/states/provision", `{"target":"clean","clean_steps":[{"interface":"power","step":"power_on","bogus":1}]}`, 403},
			{"lessee-member", "PUT", "/states/provision", `{"target":"clean","clean_steps":[{"interface":"nope"}]}`, 403},
			{"lessee-reader", "PUT", "/states/provision", `{"target":"deploy-nonsense"}`, 403},
			{"lessee-reader", "PUT", "/states/power", `{"target":"sideways"}`, 403},
			{"lessee-reader", "PATCH", "", `[{"op":"replace","path":"/uuid","value":"x"}]`, 403},
			{"lessee-member", "PATCH", "", `[{"op":"add","path":"/driver_info/x","value":{}}]`, 403},
			{"lessee-member", "PUT", "/traits", `{"traits":"not-a-list"}`, 403},
			{"lessee-reader", "PUT", "/maintenance", `{"reason":5}`, 403},
			{"owner-member", "PUT", "/management/boot_device", `{"boot_device":"floppy-disk"}`, 403},
			// Allowed callers then get the validation error.
			{"system-admin", "PUT", "/states/provision", `{"target":"deploy-nonsense"}`, 400},
			{"system-admin", "PATCH", "", `[{"op":"replace","path":"/uuid","value":"x"}]`, 400},
		}
		for _, row := range rows {
			r := clients[row.persona].Do(t, row.method, "/v1/nodes/target"+row.path, row.body)
			if r.Status != row.want {
				t.Errorf("%s %s %s %s: status %d, want %d: %s", row.persona, row.method, row.path, row.body, r.Status, row.want, r.Body)
			}
		}
	})
}

// TestHiddenLooksNonexistent: a node, marker or allocation the caller may
// not see answers exactly as one that does not exist.
func TestHiddenLooksNonexistent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "hidden", "driver": "fake", "owner": "own", "lessee": "les", "resource_class": "rc"})
		mustStatus(t, r, 201)
		hidden := r.JSON(t)["uuid"].(string)
		missing := uuid.NewString()
		other := clients["other-admin"]
		for _, path := range []string{"/v1/nodes/%s", "/v1/nodes?marker=%s", "/v1/nodes/detail?marker=%s", "/v1/nodes/%s/history", "/v1/nodes/%s/allocation", "/v1/nodes/%s/traits"} {
			a := other.Do(t, "GET", fmt.Sprintf(path, hidden), nil)
			b := other.Do(t, "GET", fmt.Sprintf(path, missing), nil)
			if a.Status != b.Status || strings.ReplaceAll(string(a.Body), hidden, "X") != strings.ReplaceAll(string(b.Body), missing, "X") {
				t.Errorf("%s: hidden answers %d %s, missing %d %s", path, a.Status, a.Body, b.Status, b.Body)
			}
		}
		// The owner's allocation on a leased node is not the lessee's to
		// learn: the node answers as unallocated, naming no allocation.
		for _, verb := range []string{"manage", "provide"} {
			mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/hidden/states/provision", map[string]any{"target": verb}), 202)
			waitState(t, admin, hidden, map[string]string{"manage": "manageable", "provide": "available"}[verb])
		}
		alloc := allocate(t, admin, map[string]any{"resource_class": "rc", "owner": "own", "candidate_nodes": []string{hidden}})["uuid"].(string)
		r = clients["lessee-reader"].Do(t, "GET", "/v1/nodes/hidden/allocation", nil)
		if r.Status != 404 || strings.Contains(string(r.Body), alloc) {
			t.Errorf("lessee reads the owner's allocation on its node: %d %s", r.Status, r.Body)
		}
		mustStatus(t, clients["owner-reader"].Do(t, "GET", "/v1/nodes/hidden/allocation", nil), 200)
	})
}

// TestDenialsAreAggregated: probing many hidden nodes adds a bounded
// number of audit rows that still count every probe.
func TestDenialsAreAggregated(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		for i := range 5 {
			mustStatus(t, admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": fmt.Sprintf("p%d", i), "driver": "fake", "owner": "own"}), 201)
		}
		const probes = 60
		for i := range probes {
			mustStatus(t, clients["other-member"].Do(t, "GET", fmt.Sprintf("/v1/nodes/p%d", i%5), nil), 404)
		}
		r := clients["system-reader"].Do(t, "GET", "/v1/events?result=denied&user=other-member", nil)
		mustStatus(t, r, 200)
		evs := r.JSON(t)["events"].([]any)
		total := 0
		for _, e := range evs {
			d, _ := e.(map[string]any)["detail"].(map[string]any)
			c, _ := d["count"].(float64)
			total += int(c)
		}
		if len(evs) == 0 || len(evs) > 3 || total != probes {
			t.Errorf("%d probes became %d denial rows counting %d: %v", probes, len(evs), total, evs)
		}
		n, err := db.AuditEvent.Query().Where(auditevent.User("other-member")).Count(context.Background())
		if err != nil || n != len(evs) {
			t.Errorf("audit table holds %d rows for the prober (%v), the API showed %d", n, err, len(evs))
		}
	})
}

// TestHistoryIsScrubbedForProjects: BMC addresses in history reach the
// system, not the owner or lessee.
func TestHistoryIsScrubbedForProjects(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		id := secretNode(t, admin, "scrub")
		msg := "Power on failed: dial tcp 10.20.30.40:623: connection refused; redfish https://bmc7.mgmt.example:8443/redfish/v1 and bmc9.mgmt.example:443 did not answer"
		if err := history.Record(context.Background(), db.Client, history.Event{NodeID: nodeID(t, db, id), Severity: history.Error, Type: "power", Message: msg}); err != nil {
			t.Fatal(err)
		}
		for persona, wantRaw := range map[string]bool{"system-reader": true, "owner-reader": false, "lessee-reader": false} {
			r := clients[persona].Do(t, "GET", "/v1/nodes/scrub/history?detail=true", nil)
			mustStatus(t, r, 200)
			body := string(r.Body)
			for _, leak := range []string{"10.20.30.40", "bmc7.mgmt.example", "bmc9.mgmt.example"} {
				if strings.Contains(body, leak) != wantRaw {
					t.Errorf("%s history: contains %s = %v: %s", persona, leak, !wantRaw, body)
				}
			}
			if !strings.Contains(body, "Power on failed") {
				t.Errorf("%s history lost the message: %s", persona, body)
			}
		}
	})
}

// TestConcurrentTransitionsHappenOnce: many identical state changes sent
// at once move the node once; the rest are told it has moved on.
func TestConcurrentTransitionsHappenOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "race", "driver": "fake", "owner": "own"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/race/states/provision", map[string]any{"target": "manage"}), 202)
		waitState(t, admin, id, "manageable")
		const n = 20
		statuses := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				statuses[i] = clients[[]string{"system-admin", "owner-member"}[i%2]].Do(t, "PUT", "/v1/nodes/race/states/provision", map[string]any{"target": "provide"}).Status
			})
		}
		wg.Wait()
		accepted := 0
		for _, s := range statuses {
			switch s {
			case 202:
				accepted++
			case 409:
			default:
				t.Errorf("status %d", s)
			}
		}
		hist := admin.Do(t, "GET", "/v1/nodes/race/history", nil).JSON(t)["history"].([]any)
		moves := 0
		for _, e := range hist {
			if strings.Contains(e.(map[string]any)["event"].(string), "provide: manageable -> available") {
				moves++
			}
		}
		if accepted != 1 || moves != 1 {
			t.Errorf("%d of %d concurrent provides accepted, %d transitions recorded; want 1 and 1", accepted, n, moves)
		}
	})
}

// TestOversizedBodiesAreRefusedUnread: every API route that takes a body
// answers 413 to one over 1 MiB, for any persona, and nothing changes.
func TestOversizedBodiesAreRefusedUnread(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		mustStatus(t, admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "big", "driver": "fake", "owner": "own", "lessee": "les"}), 201)
		r := admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_BIG", "steps": []any{map[string]any{"interface": "power", "step": "power_on", "args": map[string]any{}, "order": 1}}})
		mustStatus(t, r, 201)
		rb := r.JSON(t)["uuid"].(string)
		before, err := db.Node.Query().Count(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		huge := `{"x":"` + strings.Repeat("a", 2<<20) + `"}`
		for _, persona := range []string{"system-admin", "lessee-member", "other-reader", "anonymous"} {
			for _, rt := range []struct{ method, path string }{
				{"POST", "/v1/nodes"}, {"PATCH", "/v1/nodes/big"}, {"PUT", "/v1/nodes/big/traits"},
				{"PUT", "/v1/nodes/big/maintenance"}, {"PUT", "/v1/nodes/big/states/power"},
				{"PUT", "/v1/nodes/big/states/provision"}, {"PUT", "/v1/nodes/big/management/boot_device"},
				{"POST", "/v1/runbooks"}, {"PATCH", "/v1/runbooks/" + rb}, {"POST", "/v1/allocations"},
			} {
				if r := clients[persona].Do(t, rt.method, rt.path, huge); r.Status != 413 {
					t.Errorf("%s %s %s with 2 MiB: %d", persona, rt.method, rt.path, r.Status)
				}
			}
		}
		after, _ := db.Node.Query().Count(context.Background())
		n := admin.Do(t, "GET", "/v1/nodes/big", nil).JSON(t)
		if after != before || n["maintenance"] != false || len(n["extra"].(map[string]any)) != 0 {
			t.Errorf("refused bodies changed something: nodes %d→%d, %v", before, after, n)
		}
	})
}
